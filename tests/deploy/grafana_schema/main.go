// Command grafana-dashboard-check validates Grafana dashboard JSON files against Grafana's own
// dashboard schema, as generated into the Grafana Foundation SDK: every field must be one the
// schema knows (strict decoding, panel options and queries by their plugin's schema) and every
// constraint the schema states must hold. It prints each file's errors and exits 1 if any.
//
// Built by tests/deploy/test_dashboards_and_alerts.py from the Go module proxy (no Grafana server
// is needed: Grafana itself is AGPL and heavy to build here).
package main

import (
	"fmt"
	"os"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

func main() {
	plugins.RegisterDefaultPlugins()
	failed := false
	for _, path := range os.Args[1:] {
		if err := check(path); err != nil {
			fmt.Printf("%s: %v\n", path, err)
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}

func check(path string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var board dashboard.Dashboard
	if err := board.UnmarshalJSONStrict(raw); !empty(err) {
		return err
	}
	if err := board.Validate(); !empty(err) {
		return err
	}
	return nil
}

// empty says whether err is no error: the SDK returns its error list typed even when it is
// empty, which as an `error` is not nil.
func empty(err error) bool {
	if errs, ok := err.(cog.BuildErrors); ok {
		return len(errs) == 0
	}
	return err == nil
}
