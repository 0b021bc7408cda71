// Package docs holds the documentation's pages and their checks, so that they stay true as the
// tree moves: every path the README and the pages name exists, every relative link reaches a file
// and a heading of it, the scripts they tell to run are executable, every variable they name is one
// a program reads, every `servescope` command they name exists, the quick start's secrets fill
// every value the compose file requires, the architecture's code map has one line for every
// directory of the tree's upper levels, the SQL they show runs (Statements: the cookbook's on a
// migrated database in internal/chstore, the backups page's here), and no comment, doc, SQL file,
// rule or script cites a document the repository does not hold (a design document's or a
// reference's sections, issue numbers). The reference pages generated from the code
// (configuration.md, cli.md) are checked against it by dev/docgen.
package docs
