package server

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/servescope/servescope/internal/config"
)

// Auth modes.
const (
	// AuthToken: every page and API call needs the viewer token (a bearer header, or the session
	// cookie the login page sets).
	AuthToken = "token"
	// AuthProxy: the console trusts whoever reaches it; put it behind your own authenticating
	// proxy (and keep it off public addresses). The content token still guards prompt and output text.
	AuthProxy = "proxy"
)

// Config is the console's environment.
type Config struct {
	// ClickHouse is where servescope's tables are; use a read-only account (servescope access:
	// the console role has SELECT only, and no SELECT on prompt_text/output_text unless
	// SERVESCOPE_CONSOLE_CLICKHOUSE_CONTENT=true gave it).
	ClickHouse config.ClickHouse
	// ListenAddr is where the console serves; loopback unless told otherwise.
	ListenAddr string `env:"CONSOLE_LISTEN_ADDR" envDefault:"127.0.0.1:9104"`
	// Auth is "token" (default) or "proxy".
	Auth string `env:"CONSOLE_AUTH" envDefault:"token"`
	// Token is the viewer token (required with CONSOLE_AUTH=token); TokenFile is read instead.
	Token     string `env:"CONSOLE_TOKEN"`
	TokenFile string `env:"CONSOLE_TOKEN_FILE"`
	// ShowContent says content capture is on (GATEWAY_CAPTURE_CONTENT) and the console may show
	// prompt and output text, to viewers who logged in with ContentToken only.
	ShowContent      bool   `env:"CONSOLE_SHOW_CONTENT"`
	ContentToken     string `env:"CONSOLE_CONTENT_TOKEN"`
	ContentTokenFile string `env:"CONSOLE_CONTENT_TOKEN_FILE"`
	// RulesDir is the detector's DETECTOR_RULES_DIR, so that thresholds, windows and baselines
	// are the ones the deployed detector evaluates.
	RulesDir string `env:"DETECTOR_RULES_DIR"`
	// SLOsDir is the detector's DETECTOR_SLOS_DIR: the SLOs' burn-rate rules are rules of the
	// console too (their runbook pages, which the alerts' runbook_url opens, and the alerts page).
	SLOsDir string `env:"DETECTOR_SLOS_DIR"`
	// QueryTimeout bounds each ClickHouse query of a page.
	QueryTimeout time.Duration `env:"CONSOLE_QUERY_TIMEOUT" envDefault:"20s"`
}

// Validate checks the console's own settings.
func (c *Config) Validate() error {
	var errs []error
	if _, _, err := net.SplitHostPort(c.ListenAddr); err != nil {
		errs = append(errs, fmt.Errorf("CONSOLE_LISTEN_ADDR: %q is not host:port", c.ListenAddr))
	}
	switch c.Auth {
	case AuthToken:
		if c.Token == "" && c.TokenFile == "" {
			errs = append(errs, errors.New("CONSOLE_TOKEN or CONSOLE_TOKEN_FILE: required with CONSOLE_AUTH=token (or set CONSOLE_AUTH=proxy behind your own authenticating proxy)"))
		}
	case AuthProxy:
	default:
		errs = append(errs, fmt.Errorf("CONSOLE_AUTH: %q: want token or proxy", c.Auth))
	}
	if c.ShowContent && c.ContentToken == "" && c.ContentTokenFile == "" {
		errs = append(errs, errors.New("CONSOLE_SHOW_CONTENT=true needs CONSOLE_CONTENT_TOKEN or CONSOLE_CONTENT_TOKEN_FILE: only viewers holding it see prompt and output text"))
	}
	if c.QueryTimeout <= 0 {
		errs = append(errs, fmt.Errorf("CONSOLE_QUERY_TIMEOUT: must be positive, got %s", c.QueryTimeout))
	}
	return errors.Join(errs...)
}

// tokens returns the viewer and content tokens, reading their files.
func (c *Config) tokens() (viewer, content string, err error) {
	read := func(v, file, name string) (string, error) {
		if file == "" {
			return v, nil
		}
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("%s: read secret file: %w", name, err)
		}
		return strings.TrimRight(string(b), "\r\n"), nil
	}
	if viewer, err = read(c.Token, c.TokenFile, "CONSOLE_TOKEN_FILE"); err != nil {
		return "", "", err
	}
	if content, err = read(c.ContentToken, c.ContentTokenFile, "CONSOLE_CONTENT_TOKEN_FILE"); err != nil {
		return "", "", err
	}
	if c.Auth == AuthToken && viewer == "" {
		return "", "", errors.New("CONSOLE_TOKEN: empty")
	}
	if content != "" && content == viewer {
		return "", "", errors.New("CONSOLE_CONTENT_TOKEN must differ from CONSOLE_TOKEN: it grants more")
	}
	return viewer, content, nil
}
