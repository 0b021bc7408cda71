// Package config reads servescope's settings from environment variables with caarlos0/env.
//
// Every binary embeds the shared blocks it needs ([NATS], [ClickHouse]) in its own struct and
// calls [Load]. A value that does not parse or fails its check stops the binary at start with a
// message that names the variable, e.g. `SERVESCOPE_STREAM_REPLICAS: must be 1 or 3, got 2`.
//
// Secrets can come from a file instead of the environment: each secret variable has a `_FILE`
// twin holding a path (Docker/Kubernetes secrets), read at start.
package config

import (
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/caarlos0/env/v11"
)

// Validator is implemented by settings blocks that check their values after parsing.
type Validator interface {
	Validate() error
}

// Load parses the environment into a new T (a struct with `env` tags) and runs Validate on T and
// on every embedded or nested settings block that implements [Validator].
func Load[T any]() (T, error) {
	return LoadFrom[T](nil)
}

// LoadFrom is [Load] reading from environ (KEY→value) instead of the process environment; nil means
// the process environment. Tests use it.
func LoadFrom[T any](environ map[string]string) (T, error) {
	var cfg T
	opts := env.Options{}
	if environ != nil {
		opts.Environment = environ
	}
	if err := env.ParseWithOptions(&cfg, opts); err != nil {
		return cfg, nameVariables(&cfg, err)
	}
	var errs []error
	seen := map[string]bool{}
	validateAll(reflect.ValueOf(&cfg), func(err error) {
		// An embedded block's Validate is promoted to the outer struct too; report it once.
		if !seen[err.Error()] {
			seen[err.Error()] = true
			errs = append(errs, err)
		}
	})
	if len(errs) > 0 {
		return cfg, fmt.Errorf("configuration: %w", errors.Join(errs...))
	}
	return cfg, nil
}

// nameVariables rewrites caarlos0/env's errors, which name Go fields, to name the variables.
func nameVariables(cfg any, err error) error {
	keys := map[string][]string{}
	collectKeys(reflect.TypeOf(cfg).Elem(), keys)
	var agg env.AggregateError
	if !errors.As(err, &agg) {
		return fmt.Errorf("read configuration: %w", err)
	}
	msgs := make([]string, 0, len(agg.Errors))
	for _, e := range agg.Errors {
		var pe env.ParseError
		if errors.As(e, &pe) {
			name := strings.Join(keys[pe.Name], " or ")
			if name == "" {
				name = pe.Name
			}
			msgs = append(msgs, fmt.Sprintf("%s: invalid value: %v", name, pe.Err))
			continue
		}
		msgs = append(msgs, e.Error())
	}
	return fmt.Errorf("read configuration: %s", strings.Join(msgs, "; "))
}

func collectKeys(t reflect.Type, keys map[string][]string) {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return
	}
	for i := range t.NumField() {
		f := t.Field(i)
		key, _, _ := strings.Cut(f.Tag.Get("env"), ",")
		if key != "" {
			keys[f.Name] = append(keys[f.Name], key)
		}
		if f.Type.Kind() == reflect.Struct || (f.Type.Kind() == reflect.Pointer && f.Type.Elem().Kind() == reflect.Struct) {
			collectKeys(f.Type, keys)
		}
	}
}

func validateAll(v reflect.Value, report func(error)) {
	if v.Kind() == reflect.Pointer && v.IsNil() {
		return
	}
	if v.CanInterface() {
		if val, ok := v.Interface().(Validator); ok {
			if err := val.Validate(); err != nil {
				report(err)
			}
		}
	}
	s := v
	if s.Kind() == reflect.Pointer {
		s = s.Elem()
	}
	if s.Kind() != reflect.Struct {
		return
	}
	for i := range s.NumField() {
		f := s.Field(i)
		if s.Type().Field(i).IsExported() && f.Kind() == reflect.Struct && f.CanAddr() {
			validateAll(f.Addr(), report)
		}
	}
}
