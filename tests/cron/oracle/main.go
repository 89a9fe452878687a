// Command oracle answers cron questions with robfig/cron v3 itself, the library KubeRay uses, so
// that tests/cron/robfig_cases.json holds robfig's answers rather than ours.
//
// It reads a JSON array of cases on stdin, each {"schedule", "zone", "start", "count"}, parses
// the schedule with cron.ParseStandard as KubeRay's validation does, then "TZ=<zone> <schedule>"
// as its controller does, and steps Next from start (RFC 3339) count times. It writes the same cases with "error" (the parse error, or "") and
// "next" (Unix seconds of each activation; it stops at the zero time, robfig's "none").
package main

import (
	"encoding/json"
	"os"
	"time"

	"github.com/robfig/cron/v3"
)

type testCase struct {
	Schedule string  `json:"schedule"`
	Zone     string  `json:"zone"`
	Start    string  `json:"start"`
	Count    int     `json:"count"`
	Error    string  `json:"error"`
	Next     []int64 `json:"next"`
}

func main() {
	var cases []testCase
	if err := json.NewDecoder(os.Stdin).Decode(&cases); err != nil {
		panic(err)
	}
	for i := range cases {
		answer(&cases[i])
	}
	out := json.NewEncoder(os.Stdout)
	out.SetIndent("", " ")
	if err := out.Encode(cases); err != nil {
		panic(err)
	}
}

func answer(c *testCase) {
	c.Next = []int64{}
	// KubeRay validates the schedule alone (so surrounding spaces are refused), then fires on
	// "TZ=<zone> <schedule>".
	if _, err := cron.ParseStandard(c.Schedule); err != nil {
		c.Error = err.Error()
		return
	}
	schedule, err := cron.ParseStandard("TZ=" + c.Zone + " " + c.Schedule)
	if err != nil {
		panic(err)
	}
	t, err := time.Parse(time.RFC3339Nano, c.Start)
	if err != nil {
		panic(err)
	}
	for range c.Count {
		t = schedule.Next(t)
		if t.IsZero() {
			return
		}
		c.Next = append(c.Next, t.Unix())
	}
}
