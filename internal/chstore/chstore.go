// Package chstore opens ClickHouse connections for servescope's services and applies the
// schema migrations (golang-migrate with its ClickHouse driver, files embedded from migrations/).
package chstore

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/servescope/servescope/internal/config"
)

// Open connects to ClickHouse over the native protocol and pings it. The connection uses the
// configured database.
func Open(ctx context.Context, cfg config.ClickHouse) (driver.Conn, error) {
	opts, err := cfg.Options()
	if err != nil {
		return nil, err
	}
	conn, err := clickhouse.Open(opts)
	if err != nil {
		return nil, fmt.Errorf("open ClickHouse at %v: %w", cfg.Addr, err)
	}
	pctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout+5*time.Second)
	defer cancel()
	if err := conn.Ping(pctx); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("ping ClickHouse at %v database %s: %w", cfg.Addr, cfg.Database, err)
	}
	return conn, nil
}

// EnsureDatabase creates cfg.Database when it does not exist, connecting without selecting it.
func EnsureDatabase(ctx context.Context, cfg config.ClickHouse) error {
	noDB := cfg
	noDB.Database = "default"
	conn, err := Open(ctx, noDB)
	if err != nil {
		return err
	}
	defer conn.Close()
	// The name passed Validate's identifier check, so quoting it with backticks is safe.
	if err := conn.Exec(ctx, "CREATE DATABASE IF NOT EXISTS `"+cfg.Database+"`"); err != nil {
		return fmt.Errorf("create database %s: %w", cfg.Database, err)
	}
	return nil
}

// WithParams returns ctx carrying ClickHouse query parameters, bound server-side to the
// {name:Type} placeholders of the query, so values never become SQL text.
func WithParams(ctx context.Context, params map[string]string) context.Context {
	return clickhouse.Context(ctx, clickhouse.WithParameters(clickhouse.Parameters(params)))
}

// StringParam is v as the value of a String query parameter ({name:String}): ClickHouse reads
// such a value in its Escaped text format, so a backslash is doubled (else "a\b" reads as a,
// backspace and b, and "\x" fails with code 25) and tabs and line breaks are escaped (a raw tab
// ends the value, code 457). Values of other types (numbers, times, Array literals, which have
// their own quoting) are passed as they are.
func StringParam(v string) string { return stringParamEscaper.Replace(v) }

var stringParamEscaper = strings.NewReplacer(`\`, `\\`, "\t", `\t`, "\n", `\n`, "\r", `\r`)
