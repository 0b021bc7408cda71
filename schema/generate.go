package schema

// The JSON Schema files under jsonschema/ are generated from the types of this package.
//go:generate go run ../dev/cmd/jsonschemagen -src . -out jsonschema
