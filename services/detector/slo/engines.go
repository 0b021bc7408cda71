package slo

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"go.yaml.in/yaml/v3"

	"github.com/servescope/servescope/internal/chstore"
	"github.com/servescope/servescope/internal/config"
)

// Engines is the engines file (DETECTOR_ENGINES_FILE): what an engine-hour costs and how many
// requests an engine runs at once, per engine, per model or for every other engine. The cost and
// capacity views (migrations/000041) read it from engine_config.
//
//	currency: USD                      # default USD
//	default: {price_per_hour: 1.20}    # engines without a setting of their own
//	models:                            # by the model the engine serves (its /metrics model_name)
//	  Qwen/Qwen2.5-7B-Instruct-AWQ: {price_per_hour: 0.45, max_num_seqs: 256}
//	engines:                           # by the collector's engine name; wins over the model's
//	  vllm-0: {price_per_hour: 0.40}
//
// price_per_hour is what one engine (its GPUs) costs an hour, whether it serves or idles;
// max_num_seqs is vLLM's --max-num-seqs, the slot limit, when its start-up log does not say it.
type Engines struct {
	Currency string                   `yaml:"currency"`
	Default  *EngineSetting           `yaml:"default"`
	Models   map[string]EngineSetting `yaml:"models"`
	Engines  map[string]EngineSetting `yaml:"engines"`
	Source   string                   `yaml:"-"`
}

// EngineSetting is one engine's, model's or the default's settings; nil fields are not set.
type EngineSetting struct {
	PricePerHour *float64 `yaml:"price_per_hour"`
	MaxNumSeqs   *uint32  `yaml:"max_num_seqs"`
}

// ParseEngines reads an engines file; source names it in errors.
func ParseEngines(source string, data []byte) (*Engines, error) {
	var e Engines
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&e); err != nil {
		return nil, fmt.Errorf("engines file %s: %w", source, err)
	}
	e.Source = source
	if e.Currency == "" {
		e.Currency = "USD"
	}
	check := func(where string, s EngineSetting) error {
		if p := s.PricePerHour; p != nil && (*p < 0 || math.IsNaN(*p) || math.IsInf(*p, 0)) {
			return fmt.Errorf("engines file %s: %s: price_per_hour %g: want a price of zero or more", source, where, *p)
		}
		if n := s.MaxNumSeqs; n != nil && *n == 0 {
			return fmt.Errorf("engines file %s: %s: max_num_seqs must be at least 1", source, where)
		}
		return nil
	}
	if e.Default != nil {
		if err := check("default", *e.Default); err != nil {
			return nil, err
		}
	}
	for _, set := range []struct {
		kind string
		m    map[string]EngineSetting
	}{{"models", e.Models}, {"engines", e.Engines}} {
		for _, k := range slices.Sorted(maps.Keys(set.m)) {
			if k == "" {
				return nil, fmt.Errorf("engines file %s: %s: an empty name", source, set.kind)
			}
			if err := check(set.kind+"."+k, set.m[k]); err != nil {
				return nil, err
			}
		}
	}
	return &e, nil
}

// ReadEngines reads the engines file at path; an empty path is no file (no prices, no slot
// limits: the views then say the cost is unknown and take the slot limit from the engine's log).
func ReadEngines(path string) (*Engines, error) {
	if path == "" {
		return &Engines{Currency: "USD"}, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("DETECTOR_ENGINES_FILE: %w", err)
	}
	return ParseEngines(path, data)
}

type engineRow struct {
	LoadedAt     time.Time `ch:"loaded_at"`
	Scope        string    `ch:"scope"`
	Name         string    `ch:"name"`
	Currency     string    `ch:"currency"`
	PricePerHour *float64  `ch:"price_per_hour"`
	MaxNumSeqs   *uint32   `ch:"max_num_seqs"`
	Source       string    `ch:"source"`
}

// SyncEngines writes e into engine_config as one load at time at, on every node of a sharded
// schema, as Sync writes the SLOs.
func SyncEngines(ctx context.Context, cfg config.ClickHouse, conn driver.Conn, e *Engines, at time.Time) error {
	at = at.UTC().Truncate(time.Microsecond)
	rs := []engineRow{{LoadedAt: at, Currency: e.Currency, Source: e.Source}}
	if e.Default != nil {
		rs = append(rs, engineRow{LoadedAt: at, Scope: "default", Currency: e.Currency, PricePerHour: e.Default.PricePerHour,
			MaxNumSeqs: e.Default.MaxNumSeqs, Source: e.Source})
	}
	for _, set := range []struct {
		scope string
		m     map[string]EngineSetting
	}{{"model", e.Models}, {"engine", e.Engines}} {
		for name, s := range set.m {
			rs = append(rs, engineRow{LoadedAt: at, Scope: set.scope, Name: name, Currency: e.Currency,
				PricePerHour: s.PricePerHour, MaxNumSeqs: s.MaxNumSeqs, Source: e.Source})
		}
	}
	err := chstore.EveryNode(ctx, cfg, conn, func(ctx context.Context, c driver.Conn) error {
		b, err := c.PrepareBatch(ctx, "INSERT INTO engine_config")
		if err != nil {
			return err
		}
		for i := range rs {
			if err := b.AppendStruct(&rs[i]); err != nil {
				_ = b.Abort()
				return err
			}
		}
		return b.Send()
	})
	if err != nil {
		return fmt.Errorf("write the engines file into engine_config: %w", err)
	}
	return nil
}
