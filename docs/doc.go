// Package docs holds the checks of the repository's documentation, so that it stays true as the
// tree moves: every path the README names exists, every link to a Markdown file reaches a heading
// it has, the scripts it tells to run are there and executable, its code map has one line for
// every directory of the tree's upper levels, and no comment, doc, SQL file, rule or script cites
// a document the repository does not hold (a design document's or a reference's sections, issue
// numbers).
package docs
