// Command golayout writes how Go's encoding/json lays out KubeRay's RayClusterSpec: for every
// struct type reachable from it, its fields in encoding order, their JSON names, their omitempty
// and omitzero options and their types. ray_operator.spec.go_json replays that layout to
// reproduce, byte for byte, the JSON that KubeRay hashes into its annotations
// (`ray.io/upgrade-strategy-recreate-hash`, `ray.io/hash-without-replicas-and-workers-to-delete`).
//
// Run by `python -m ray_operator.apigen --fetch-go-layout`, which saves its output as
// apigen/kubernetes/kuberay_go_layout.json. The versions in go.mod are the ones KubeRay's release
// pins; change them together with KubeRay's.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
)

// Types whose JSON comes from their own MarshalJSON, named as the layout's type language does.
var marshalers = map[string]string{
	"k8s.io/apimachinery/pkg/api/resource.Quantity":                 "Quantity",
	"k8s.io/apimachinery/pkg/util/intstr.IntOrString":               "IntOrString",
	"k8s.io/apimachinery/pkg/apis/meta/v1.Time":                     "Time",
	"k8s.io/apimachinery/pkg/apis/meta/v1.MicroTime":                "MicroTime",
	"k8s.io/apimachinery/pkg/apis/meta/v1.FieldsV1":                 "FieldsV1",
	"k8s.io/apimachinery/pkg/runtime.RawExtension":                  "RawExtension",
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1.JSON": "JSON",
}

type field struct {
	Name      string `json:"name"`
	Type      string `json:"type"`
	OmitEmpty bool   `json:"omitempty"`
	OmitZero  bool   `json:"omitzero"`
}

type document struct {
	Root     string             `json:"root"`
	Modules  map[string]string  `json:"modules"`
	Go       string             `json:"go"`
	Structs  map[string][]field `json:"structs"`
	Packages map[string]string  `json:"packages"`
}

type walker struct {
	structs  map[string][]field
	packages map[string]string
	pending  []reflect.Type
}

func main() {
	w := &walker{structs: map[string][]field{}, packages: map[string]string{}}
	root := w.ref(reflect.TypeOf(rayv1.RayClusterSpec{}))
	for len(w.pending) > 0 {
		t := w.pending[0]
		w.pending = w.pending[1:]
		w.structs[t.Name()] = w.fields(t)
	}
	doc := document{Root: root, Modules: modules(), Go: runtime.Version(), Structs: w.structs, Packages: w.packages}
	out, err := json.MarshalIndent(doc, "", " ")
	if err != nil {
		panic(err)
	}
	os.Stdout.Write(append(out, '\n'))
}

func modules() map[string]string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		panic("no build info")
	}
	wanted := map[string]bool{
		"github.com/ray-project/kuberay/ray-operator": true,
		"k8s.io/api":          true,
		"k8s.io/apimachinery": true,
	}
	result := map[string]string{}
	for _, dep := range info.Deps {
		if wanted[dep.Path] {
			result[dep.Path] = dep.Version
		}
	}
	return result
}

// ref names t in the layout's type language: bool, string, int8…int64, uint8…uint64, float32,
// float64, *T, []T, map[K]T, a struct's name, or one of the marshalers above.
func (w *walker) ref(t reflect.Type) string {
	full := t.PkgPath() + "." + t.Name()
	if special, ok := marshalers[full]; ok {
		return special
	}
	switch t.Kind() {
	case reflect.Pointer:
		return "*" + w.ref(t.Elem())
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return "bytes" // encoding/json writes []byte as base64
		}
		return "[]" + w.ref(t.Elem())
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			panic(fmt.Sprintf("%s: map key %s is not a string kind", full, t.Key()))
		}
		return "map[string]" + w.ref(t.Elem())
	case reflect.Struct:
		if reflect.PointerTo(t).Implements(jsonMarshaler) || reflect.PointerTo(t).Implements(textMarshaler) {
			panic(fmt.Sprintf("%s has its own MarshalJSON: teach the layout about it", full))
		}
		if owner, seen := w.packages[t.Name()]; seen {
			if owner != t.PkgPath() {
				panic(fmt.Sprintf("two struct types named %s (%s, %s)", t.Name(), owner, t.PkgPath()))
			}
			return t.Name()
		}
		w.packages[t.Name()] = t.PkgPath()
		w.pending = append(w.pending, t)
		return t.Name()
	case reflect.Bool, reflect.String, reflect.Float32, reflect.Float64,
		reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if reflect.PointerTo(t).Implements(jsonMarshaler) || reflect.PointerTo(t).Implements(textMarshaler) {
			panic(fmt.Sprintf("%s has its own marshaler: teach the layout about it", full))
		}
		return t.Kind().String()
	}
	panic(fmt.Sprintf("%s: kind %s is not supported by the layout", full, t.Kind()))
}

var (
	jsonMarshaler = reflect.TypeOf((*json.Marshaler)(nil)).Elem()
	textMarshaler = reflect.TypeOf((*interface{ MarshalText() ([]byte, error) })(nil)).Elem()
)

// candidate is a field found at some embedding depth, as encoding/json's typeFields collects them.
type candidate struct {
	field
	index  []int
	tagged bool
}

// fields lists t's JSON fields in the order encoding/json writes them: exported fields in
// declaration order, embedded structs without a JSON name flattened in place, and on a name
// clash the shallowest field (or the only tagged one at that depth) wins, the others vanish.
func (w *walker) fields(t reflect.Type) []field {
	var all []candidate
	w.collect(t, nil, map[reflect.Type]bool{}, &all)
	byName := map[string][]candidate{}
	for _, c := range all {
		byName[c.Name] = append(byName[c.Name], c)
	}
	var kept []candidate
	for _, c := range all {
		if dominant(byName[c.Name]) == sameIndex(c) {
			kept = append(kept, c)
		}
	}
	sort.SliceStable(kept, func(i, j int) bool { return lessIndex(kept[i].index, kept[j].index) })
	result := make([]field, len(kept))
	for i, c := range kept {
		result[i] = c.field
	}
	return result
}

func (w *walker) collect(t reflect.Type, prefix []int, visited map[reflect.Type]bool, out *[]candidate) {
	if visited[t] {
		return
	}
	visited[t] = true
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		index := append(append([]int{}, prefix...), i)
		ft := f.Type
		if f.Anonymous && ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if !f.IsExported() && !(f.Anonymous && ft.Kind() == reflect.Struct) {
			continue
		}
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, options, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" && ft.Kind() == reflect.Struct {
			if f.Type.Kind() == reflect.Pointer {
				panic(fmt.Sprintf("%s embeds *%s: a nil embedded pointer is not modelled", t.Name(), ft.Name()))
			}
			w.collect(ft, index, visited, out)
			continue
		}
		if !f.IsExported() {
			continue
		}
		if hasOption(options, "string") {
			panic(fmt.Sprintf("%s.%s uses the ,string option: not modelled", t.Name(), f.Name))
		}
		tagged := name != ""
		if name == "" {
			name = f.Name
		}
		*out = append(*out, candidate{
			field: field{
				Name:      name,
				Type:      w.ref(f.Type),
				OmitEmpty: hasOption(options, "omitempty"),
				OmitZero:  hasOption(options, "omitzero"),
			},
			index:  index,
			tagged: tagged,
		})
	}
	delete(visited, t)
}

func hasOption(options, want string) bool {
	for _, option := range strings.Split(options, ",") {
		if option == want {
			return true
		}
	}
	return false
}

// dominant returns the index of the field that wins among fields sharing one JSON name, or nil.
func dominant(fields []candidate) string {
	minDepth := len(fields[0].index)
	for _, f := range fields {
		if len(f.index) < minDepth {
			minDepth = len(f.index)
		}
	}
	var shallow []candidate
	for _, f := range fields {
		if len(f.index) == minDepth {
			shallow = append(shallow, f)
		}
	}
	if len(shallow) == 1 {
		return sameIndex(shallow[0])
	}
	var tagged []candidate
	for _, f := range shallow {
		if f.tagged {
			tagged = append(tagged, f)
		}
	}
	if len(tagged) == 1 {
		return sameIndex(tagged[0])
	}
	return ""
}

func sameIndex(c candidate) string { return fmt.Sprint(c.index) }

func lessIndex(a, b []int) bool {
	for k := 0; k < len(a) && k < len(b); k++ {
		if a[k] != b[k] {
			return a[k] < b[k]
		}
	}
	return len(a) < len(b)
}
