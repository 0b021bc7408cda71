// Package web holds the console's page templates, its script and style, and the chart library
// (uPlot, vendor/: copied from the npm package pinned by package.json and package-lock.json by
// scripts/console-assets, and committed so that a clean clone builds and the page needs no
// internet). Everything is embedded in the binary.
package web

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed templates/*.html
var Templates embed.FS

//go:embed static/* vendor/uPlot.iife.min.js vendor/uPlot.min.css
var assets embed.FS

// Static serves static/ and vendor/ under their names (e.g. /static/app.js, /static/vendor/...).
func Static() http.Handler {
	static, _ := fs.Sub(assets, "static")
	files := http.FileServerFS(static)
	vendor := http.FileServerFS(assets)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		if len(r.URL.Path) > 7 && r.URL.Path[:7] == "vendor/" {
			vendor.ServeHTTP(w, r)
			return
		}
		files.ServeHTTP(w, r)
	})
}
