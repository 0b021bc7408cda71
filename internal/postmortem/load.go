package postmortem

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/servescope/servescope/internal/chstore"
	"github.com/servescope/servescope/schema"
)

//go:embed sql/*.sql
var sqlFiles embed.FS

func query(name string) string {
	b, err := sqlFiles.ReadFile("sql/" + name + ".sql")
	if err != nil {
		// The files are embedded at build time; a missing one is a build defect.
		panic(fmt.Sprintf("postmortem: embedded query %s: %v", name, err))
	}
	return string(b)
}

// ErrNoData is wrapped by Load's error when engine_logs holds nothing to read.
var ErrNoData = errors.New("no data")

// Lookback is how much log before the death Load reads: enough stats lines (vLLM prints one every
// 10 s) and the start-up lines of an engine that died soon after starting.
const Lookback = 10 * time.Minute

// maxLines bounds how many lines Load reads around one death.
const maxLines = 50000

// Load reads from engine_logs the lines around the latest death of engine (empty: any engine) at
// or before at (zero: the latest), and the model the engines served (empty when ambiguous). With no
// fatal line it returns the last Lookback of the engine's log, in which Analyze finds no crash.
// The error wraps ErrNoData when there is no line to read.
func Load(ctx context.Context, conn driver.Conn, engine string, at time.Time) ([]schema.EngineLog, string, error) {
	var atUS int64
	if !at.IsZero() {
		atUS = at.UnixMicro()
	}
	var end time.Time
	var dead string
	err := conn.QueryRow(chstore.WithParams(ctx, map[string]string{"engine": chstore.StringParam(engine), "at_us": strconv.FormatInt(atUS, 10)}),
		query("death")).Scan(&dead, &end)
	switch {
	case err == nil:
		engine = dead
	case errors.Is(err, sql.ErrNoRows):
		var total uint64
		var latestEngine string
		var latest time.Time
		if err := conn.QueryRow(chstore.WithParams(ctx, map[string]string{"engine": chstore.StringParam(engine)}), query("latest")).Scan(&total, &latestEngine, &latest); err != nil {
			return nil, "", fmt.Errorf("read the latest line of engine_logs: %w", err)
		}
		if total == 0 {
			return nil, "", fmt.Errorf("%w: engine_logs is empty: no engine log has been shipped (run the collector with COLLECTOR_LOG_FILES, or `collector logs FILE`), or read a file with --log", ErrNoData)
		}
		if latest.Unix() <= 0 {
			return nil, "", fmt.Errorf("%w: engine_logs has no line of engine %q", ErrNoData, engine)
		}
		engine, end = latestEngine, latest
		if !at.IsZero() && at.Before(end) {
			end = at
		}
	default:
		return nil, "", fmt.Errorf("find the latest fatal line in engine_logs: %w", err)
	}
	lines, err := loadLines(ctx, conn, engine, end.Add(-Lookback), end.Add(time.Minute))
	if err != nil {
		return nil, "", err
	}
	if len(lines) == 0 {
		return nil, "", fmt.Errorf("%w: engine_logs has no line of engine %q between %s and %s", ErrNoData, engine,
			end.Add(-Lookback).Format(time.RFC3339), end.Add(time.Minute).Format(time.RFC3339))
	}
	var model string
	if err := conn.QueryRow(chstore.WithParams(ctx, map[string]string{"to_us": strconv.FormatInt(end.UnixMicro(), 10)}), query("model")).Scan(&model); err != nil {
		return nil, "", fmt.Errorf("read the served model from engine_samples: %w", err)
	}
	return lines, model, nil
}

func loadLines(ctx context.Context, conn driver.Conn, engine string, from, to time.Time) ([]schema.EngineLog, error) {
	rows, err := conn.Query(chstore.WithParams(ctx, map[string]string{
		"engine": engine, "from_us": strconv.FormatInt(from.UnixMicro(), 10),
		"to_us": strconv.FormatInt(to.UnixMicro(), 10), "limit": strconv.Itoa(maxLines),
	}), query("lines"))
	if err != nil {
		return nil, fmt.Errorf("read the log of engine %s from engine_logs: %w", engine, err)
	}
	defer rows.Close()
	var out []schema.EngineLog
	for rows.Next() {
		var l schema.EngineLog
		if err := rows.Scan(&l.TS, &l.Engine, &l.Source, &l.Offset, &l.Line, &l.Level, &l.Process, &l.Logger, &l.EngineIndex, &l.Engines, &l.Message,
			&l.PromptThroughputTPS, &l.GenerationThroughputTPS, &l.Running, &l.Waiting, &l.KVCacheUsagePerc,
			&l.PrefixCacheHitRate, &l.Preemptions, &l.ExceptionType, &l.OOMBytesRequested, &l.OOMTotalCapacityBytes,
			&l.OOMFreeBytes, &l.Frames); err != nil {
			return nil, fmt.Errorf("scan a line of engine %s from engine_logs: %w", engine, err)
		}
		l.TS = l.TS.UTC()
		if len(l.Frames) == 0 {
			l.Frames = nil
		}
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the log of engine %s from engine_logs: %w", engine, err)
	}
	return out, nil
}

// LoadSamples reads the /metrics samples of engine (the collector's name for the engine: its
// scrape target, "<name>#<index>" for each engine of a data-parallel server) taken while lines
// were written, up to the last line, by engine index (vLLM's `engine` label, "" for V0's
// unlabelled series): the dead engine's own running count and KV usage when its log gives only
// several engines' sum ([Options.Samples]). Nothing when engine has no samples under that name.
func LoadSamples(ctx context.Context, conn driver.Conn, engine string, lines []schema.EngineLog) (map[string][]SamplePoint, error) {
	if len(lines) == 0 {
		return nil, nil
	}
	from, to := lines[0].TS, lines[len(lines)-1].TS
	rows, err := conn.Query(chstore.WithParams(ctx, map[string]string{
		"engine": engine, "from_us": strconv.FormatInt(from.UnixMicro(), 10), "to_us": strconv.FormatInt(to.UnixMicro(), 10),
	}), query("samples"))
	if err != nil {
		return nil, fmt.Errorf("read the samples of engine %s from engine_samples: %w", engine, err)
	}
	defer rows.Close()
	out := map[string][]SamplePoint{}
	for rows.Next() {
		var idx string
		var p SamplePoint
		if err := rows.Scan(&idx, &p.TS, &p.Running, &p.KVCacheUsagePerc); err != nil {
			return nil, fmt.Errorf("scan a sample of engine %s: %w", engine, err)
		}
		p.TS = p.TS.UTC()
		out[idx] = append(out[idx], p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the samples of engine %s from engine_samples: %w", engine, err)
	}
	return out, nil
}
