package benchkit

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/servescope/servescope/internal/service"
)

// PrintResult writes v as one line of JSON on standard output: the last line of every bench,
// the one scripts/bench keeps.
func PrintResult(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode the result: %w", err)
	}
	fmt.Println(string(b))
	return nil
}

// Verdict is a bench's exit: 2 with err when the bench could not run, 1 when it ran and missed a
// target (met false), 0 when it met them all.
func Verdict(met bool, err error) error {
	if err != nil {
		return service.Exit(2, err)
	}
	if !met {
		return service.Exit(1, nil)
	}
	return nil
}

// PositiveInts parses the comma-separated list of flag --name, each a positive whole number (a
// rate, a count); a bad item is a usage error naming the flag and the item, what is described by
// what (e.g. "rate").
func PositiveInts(name, list, what string) ([]int, error) {
	return parseList(name, list, what, func(f string) (int, bool) {
		n, err := strconv.Atoi(f)
		return n, err == nil && n > 0
	})
}

// PositiveDurations parses the comma-separated list of flag --name, each a positive Go duration
// ("1s", "200ms"), as PositiveInts.
func PositiveDurations(name, list string) ([]time.Duration, error) {
	return parseList(name, list, "duration", func(f string) (time.Duration, bool) {
		d, err := time.ParseDuration(f)
		return d, err == nil && d > 0
	})
}

func parseList[T any](name, list, what string, parse func(string) (T, bool)) ([]T, error) {
	var out []T
	for _, f := range strings.Split(list, ",") {
		v, ok := parse(strings.TrimSpace(f))
		if !ok {
			return nil, service.UsageError(fmt.Errorf("--%s: %q is not a positive %s", name, f, what))
		}
		out = append(out, v)
	}
	return out, nil
}
