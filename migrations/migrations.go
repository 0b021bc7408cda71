// Package migrations holds servescope's ClickHouse migrations in golang-migrate's file naming
// (NNNNNN_name.up.sql / .down.sql), embedded so that `servescope migrate` needs no files on disk.
// Statements in one file are separated by ';' (applied with x-multi-statement), so comments in
// these files must not contain that character.
package migrations

import "embed"

// FS holds the migration files.
//
//go:embed *.sql
var FS embed.FS
