// Command oracle answers "what does KubeRay make of this YAML?" with the library KubeRay uses,
// sigs.k8s.io/yaml (over go.yaml.in/yaml/v2), so that tests/bounded_yaml/go_yaml_cases.json
// holds Go's answers rather than ours.
//
// It reads a JSON array of cases on stdin, each {"name", "text"}, and decodes each text as
// KubeRay decodes serveConfigV2 and runtimeEnvYAML: yaml.Unmarshal into a map[string]interface{}
// (for a text that is not a mapping, into an interface{}). It writes the same cases with "error"
// (the error, or "") and "json" (the JSON of the decoded value, or "").
package main

import (
	"encoding/json"
	"os"

	"sigs.k8s.io/yaml"
)

type testCase struct {
	Name  string `json:"name"`
	Text  string `json:"text"`
	Error string `json:"error"`
	JSON  string `json:"json"`
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
	out.SetEscapeHTML(false)
	if err := out.Encode(cases); err != nil {
		panic(err)
	}
}

func answer(c *testCase) {
	var value interface{}
	if err := yaml.Unmarshal([]byte(c.Text), &value); err != nil {
		c.Error = err.Error()
		return
	}
	encoded, err := json.Marshal(value)
	if err != nil {
		c.Error = err.Error()
		return
	}
	c.JSON = string(encoded)
}
