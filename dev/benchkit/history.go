package benchkit

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/servescope/servescope/dev/history"
	"github.com/servescope/servescope/internal/chstore"
	"github.com/servescope/servescope/internal/config"
)

// HistoryFlags select the two histories a bench compares (the history and console benches): one
// spec (dev/history's normal traffic of Requests over Span ending at End), generated into a long
// database from Generate before End and into a short one from Short before End, so both hold the
// same newest rows and differ only in how much history lies behind them.
type HistoryFlags struct {
	// Requests over Span is the traffic's rate; Span is the whole history the spec describes.
	Requests uint64
	Span     time.Duration
	// Generate is the newest part of Span the long database gets (Span when 0): a month at a
	// production rate is ~40 GB, more than a shared disk may hold, and its newest days are the
	// very rows a month would have there.
	Generate time.Duration
	// Short is the newest part of Span the short database gets.
	Short time.Duration
	// End is the history's end, RFC 3339 (now when empty): a history generated ahead of a run
	// can end later than its generation did, so windows ending at the run's now() are full.
	End string
	// LongDatabase and ShortDatabase, when set, are databases already holding this spec's
	// histories (dev/cmd/history with the same flags): the bench reads them and keeps them.
	LongDatabase, ShortDatabase string
	Engines                     int
	Seed                        uint64
	SampleInterval, LogInterval time.Duration
	Chunk                       uint64
}

// Register defines the flags on fs, with the bench's own default sample interval.
func (f *HistoryFlags) Register(fs *flag.FlagSet, sampleInterval time.Duration) {
	fs.Uint64Var(&f.Requests, "requests", 100_000_000, "requests over the whole -span (the traffic's rate)")
	fs.DurationVar(&f.Span, "span", 30*24*time.Hour, "the whole history the traffic describes")
	fs.DurationVar(&f.Generate, "generate", 0, "the newest part of -span the long database holds (0: all of it)")
	fs.DurationVar(&f.Short, "short", 26*time.Hour, "the newest part of -span the short database holds")
	fs.StringVar(&f.End, "end", "", "the history's end, RFC 3339 (default now)")
	fs.StringVar(&f.LongDatabase, "long-database", "", "a database holding the long history already (dev/cmd/history, same flags): read, kept")
	fs.StringVar(&f.ShortDatabase, "short-database", "", "a database holding the short history already: read, kept")
	fs.IntVar(&f.Engines, "engines", 4, "vLLM engines in the history")
	fs.Uint64Var(&f.Seed, "seed", 1, "random seed of the history")
	fs.DurationVar(&f.SampleInterval, "sample-interval", sampleInterval, "the collector's scrape period per engine in the history")
	fs.DurationVar(&f.LogInterval, "log-interval", 10*time.Second, "vLLM's stats line period per engine in the history")
	fs.Uint64Var(&f.Chunk, "chunk", 2_000_000, "requests per INSERT while generating")
}

// Spec is the history the flags describe, ending at End or else at now (to the minute).
func (f HistoryFlags) Spec(now time.Time) (history.Spec, error) {
	end := now.UTC().Truncate(time.Minute)
	if f.End != "" {
		var err error
		if end, err = time.Parse(time.RFC3339, f.End); err != nil {
			return history.Spec{}, fmt.Errorf("-end: %w", err)
		}
	}
	if (f.LongDatabase == "") != (f.ShortDatabase == "") {
		return history.Spec{}, errors.New("give both -long-database and -short-database, or neither")
	}
	if f.Short <= 0 || f.Short > f.Span || f.Generate < 0 || f.Generate > f.Span {
		return history.Spec{}, fmt.Errorf("-short %s and -generate %s must lie within -span %s", f.Short, f.Generate, f.Span)
	}
	spec := history.Normal(end, f.Span, f.Requests)
	spec.Engines, spec.Seed = f.Engines, f.Seed
	spec.SampleInterval, spec.StatsLogInterval = f.SampleInterval, f.LogInterval
	return spec, spec.Validate()
}

// Histories are the short and the long database of HistoryFlags.
type Histories struct {
	Spec        history.Spec
	Short, Long *Database
	// From is where each database's history begins (the spec's Start for a whole one).
	ShortFrom, LongFrom time.Time
	// Rows are the active rows per table of each database; GenerateS the seconds generating
	// took (0 for databases given).
	ShortRows, LongRows           map[string]uint64
	ShortGenerateS, LongGenerateS float64
	generated                     bool
}

// OpenHistories generates both histories into new databases named prefix_short and
// prefix_long on the server of cfg, or opens the given ones.
func OpenHistories(ctx context.Context, cfg config.ClickHouse, f HistoryFlags, prefix string, log *slog.Logger) (*Histories, error) {
	spec, err := f.Spec(time.Now())
	if err != nil {
		return nil, err
	}
	h := &Histories{Spec: spec, ShortFrom: spec.End.Add(-f.Short), LongFrom: spec.Start()}
	if f.Generate > 0 {
		h.LongFrom = spec.End.Add(-f.Generate)
	}
	if f.LongDatabase != "" {
		if h.Short, err = OpenDatabase(ctx, cfg, f.ShortDatabase); err == nil {
			h.Long, err = OpenDatabase(ctx, cfg, f.LongDatabase)
		}
	} else {
		h.generated = true
		for _, d := range []struct {
			db   **Database
			from time.Time
			took *float64
			name string
		}{{&h.Short, h.ShortFrom, &h.ShortGenerateS, prefix + "_short"}, {&h.Long, h.LongFrom, &h.LongGenerateS, prefix + "_long"}} {
			if *d.db, err = CreateDatabase(ctx, cfg, d.name, nil); err != nil {
				break
			}
			if err = history.ExtendRetention(ctx, (*d.db).Conn, spec); err != nil {
				break
			}
			opt := history.Options{ChunkRequests: f.Chunk, Progress: func(table string, rows uint64) {
				log.Info("generating", "database", d.name, "table", table, "rows", rows)
			}}
			if d.from.After(spec.Start()) {
				opt.From = d.from
			}
			t0 := time.Now()
			if _, err = spec.Generate(ctx, (*d.db).Conn, opt); err != nil {
				err = fmt.Errorf("%s: generate: %w", d.name, err)
				break
			}
			*d.took = Round(time.Since(t0).Seconds(), 1)
			log.Info("generated", "database", d.name, "took", time.Since(t0).Round(time.Second))
		}
	}
	if err == nil {
		if h.ShortRows, err = ActiveRows(ctx, h.Short); err == nil {
			h.LongRows, err = ActiveRows(ctx, h.Long)
		}
	}
	if err != nil {
		h.Close()
		return nil, err
	}
	return h, nil
}

// Close drops the databases OpenHistories generated and closes the connections to given ones.
func (h *Histories) Close() {
	for _, d := range []*Database{h.Short, h.Long} {
		switch {
		case d == nil:
		case h.generated:
			_ = d.Drop()
		default:
			_ = d.Conn.Close()
		}
	}
}

// OpenDatabase connects to an existing database on the server of cfg.
func OpenDatabase(ctx context.Context, cfg config.ClickHouse, name string) (*Database, error) {
	cfg.Database = name
	conn, err := chstore.Open(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open database %s: %w", name, err)
	}
	return &Database{Config: cfg, Conn: conn}, nil
}

// ActiveRows are the rows of every table of d, from its active parts.
func ActiveRows(ctx context.Context, d *Database) (map[string]uint64, error) {
	rows, err := d.Conn.Query(ctx, "SELECT table, sum(rows) FROM system.parts WHERE database = currentDatabase() AND active GROUP BY table")
	if err != nil {
		return nil, fmt.Errorf("read the tables' rows of %s: %w", d.Config.Database, err)
	}
	defer rows.Close()
	out := map[string]uint64{}
	for rows.Next() {
		var t string
		var n uint64
		if err := rows.Scan(&t, &n); err != nil {
			return nil, fmt.Errorf("read the tables' rows of %s: %w", d.Config.Database, err)
		}
		out[t] = n
	}
	return out, rows.Err()
}
