// render-chart: a small stand-in for `helm template`, for machines without Helm.
//
// It renders a chart directory with Go's text/template and the sprig function library (the engine and
// functions Helm uses), plus Helm's own functions and objects as Helm defines them: include, tpl, required,
// toYaml, fromYaml, fromYamlArray, toJson, fromJson, lookup (empty, as in `helm template`), .Values
// (values.yaml, then -f files, then --set / --set-string in order), .Release, .Chart, .Capabilities
// (KubeVersion, APIVersions.Has), .Template and .Files (Get, GetBytes). Chart.yaml's kubeVersion constraint is
// checked against --kube-version. Output: every rendered document after "---" and a "# Source:" line, ordered
// by Helm's install order of kinds, then by template path. What it does not cover (subcharts, hooks,
// values.schema.json validation, .Files.Glob / AsConfig, NOTES.txt) is listed in docs/deploy.md.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/template"

	"github.com/Masterminds/semver/v3"
	"github.com/Masterminds/sprig/v3"
	"sigs.k8s.io/yaml"
)

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

type options struct {
	chart       string
	kubeVersion string
	release     string
	namespace   string
	sets        []setArg
	valueFiles  []string
	apiVersions []string
}

type setArg struct {
	text   string
	string bool
}

func usage() {
	fmt.Fprintln(os.Stderr, `usage: render-chart CHART [--kube-version X.Y[.Z]] [--set k=v ...] [--set-string k=v ...]
                    [-f values.yaml ...] [--namespace NS] [--name RELEASE] [--api-versions G/V ...]`)
	os.Exit(2)
}

func parseArgs(args []string) options {
	o := options{kubeVersion: "1.33.0", release: "release-name", namespace: "default"}
	next := func(i *int, flag string) string {
		if *i+1 >= len(args) {
			fmt.Fprintf(os.Stderr, "render-chart: %s needs a value\n", flag)
			os.Exit(2)
		}
		*i++
		return args[*i]
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		flag, val, hasVal := strings.Cut(a, "=")
		get := func() string {
			if hasVal {
				return val
			}
			return next(&i, flag)
		}
		switch flag {
		case "--kube-version":
			o.kubeVersion = get()
		case "--set":
			o.sets = append(o.sets, setArg{get(), false})
		case "--set-string":
			o.sets = append(o.sets, setArg{get(), true})
		case "-f", "--values":
			o.valueFiles = append(o.valueFiles, get())
		case "--namespace", "-n":
			o.namespace = get()
		case "--name", "--release-name":
			o.release = get()
		case "--api-versions", "-a":
			o.apiVersions = append(o.apiVersions, get())
		case "-h", "--help":
			usage()
		default:
			if strings.HasPrefix(a, "-") || o.chart != "" {
				fmt.Fprintf(os.Stderr, "render-chart: unknown argument %q\n", a)
				usage()
			}
			o.chart = a
		}
	}
	if o.chart == "" {
		usage()
	}
	return o
}

// ---------------------------------------------------------------------------------------------- values

// mergeValues merges src into dst as Helm coalesces user values over defaults: maps merge key by key,
// anything else replaces; a null removes the key.
func mergeValues(dst, src map[string]interface{}) map[string]interface{} {
	for k, v := range src {
		if v == nil {
			delete(dst, k)
			continue
		}
		sm, sok := v.(map[string]interface{})
		dm, dok := dst[k].(map[string]interface{})
		if sok && dok {
			dst[k] = mergeValues(dm, sm)
		} else {
			dst[k] = v
		}
	}
	return dst
}

// splitUnescaped splits s at sep, outside {...} lists and not after a backslash.
func splitUnescaped(s string, sep rune) []string {
	var out []string
	var cur strings.Builder
	depth, escaped := 0, false
	for _, r := range s {
		switch {
		case escaped:
			cur.WriteRune(r)
			escaped = false
			continue
		case r == '\\':
			cur.WriteRune(r)
			escaped = true
			continue
		case r == '{':
			depth++
		case r == '}':
			depth--
		case r == sep && depth == 0:
			out = append(out, cur.String())
			cur.Reset()
			continue
		}
		cur.WriteRune(r)
	}
	return append(out, cur.String())
}

func unescape(s string) string {
	var b strings.Builder
	escaped := false
	for _, r := range s {
		if !escaped && r == '\\' {
			escaped = true
			continue
		}
		escaped = false
		b.WriteRune(r)
	}
	return b.String()
}

// typedValue is Helm's --set typing: true/false, null, 64-bit integers (no leading zero); the rest strings.
func typedValue(v string, asString bool) interface{} {
	if asString {
		return v
	}
	switch strings.ToLower(v) {
	case "true":
		return true
	case "false":
		return false
	case "null":
		return nil
	}
	if len(v) > 0 && (v == "0" || v[0] != '0') {
		if i, err := strconv.ParseInt(v, 10, 64); err == nil {
			return i
		}
	}
	return v
}

type pathPart struct {
	key   string
	index int // -1: a map key
}

func parseKey(key string) ([]pathPart, error) {
	var parts []pathPart
	for _, seg := range splitUnescaped(key, '.') {
		name := seg
		var idx []int
		for strings.HasSuffix(name, "]") {
			open := strings.LastIndex(name, "[")
			if open < 0 {
				return nil, fmt.Errorf("--set %s: unbalanced [ ]", key)
			}
			n, err := strconv.Atoi(name[open+1 : len(name)-1])
			if err != nil || n < 0 {
				return nil, fmt.Errorf("--set %s: list index must be a number >= 0", key)
			}
			idx = append([]int{n}, idx...)
			name = name[:open]
		}
		if name == "" {
			return nil, fmt.Errorf("--set %s: empty key", key)
		}
		parts = append(parts, pathPart{unescape(name), -1})
		for _, n := range idx {
			parts = append(parts, pathPart{"", n})
		}
	}
	return parts, nil
}

func setPath(node interface{}, parts []pathPart, value interface{}) interface{} {
	p := parts[0]
	last := len(parts) == 1
	if p.index < 0 {
		m, ok := node.(map[string]interface{})
		if !ok {
			m = map[string]interface{}{}
		}
		if last {
			m[p.key] = value
		} else {
			m[p.key] = setPath(m[p.key], parts[1:], value)
		}
		return m
	}
	l, _ := node.([]interface{})
	for len(l) <= p.index {
		l = append(l, nil)
	}
	if last {
		l[p.index] = value
	} else {
		l[p.index] = setPath(l[p.index], parts[1:], value)
	}
	return l
}

func applySet(values map[string]interface{}, arg setArg) error {
	for _, item := range splitUnescaped(arg.text, ',') {
		if item == "" {
			continue
		}
		k, v, ok := strings.Cut(item, "=")
		if !ok {
			return fmt.Errorf("--set %q: expected key=value", item)
		}
		parts, err := parseKey(k)
		if err != nil {
			return err
		}
		var value interface{}
		if strings.HasPrefix(v, "{") && strings.HasSuffix(v, "}") {
			list := []interface{}{}
			if inner := v[1 : len(v)-1]; inner != "" {
				for _, e := range splitUnescaped(inner, ',') {
					list = append(list, typedValue(unescape(e), arg.string))
				}
			}
			value = list
		} else {
			value = typedValue(unescape(v), arg.string)
		}
		setPath(values, parts, value)
	}
	return nil
}

func readYAMLMap(path string) (map[string]interface{}, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]interface{}{}
	if err := yaml.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	return out, nil
}

// ---------------------------------------------------------------------------------------------- objects

type files map[string][]byte

func (f files) Get(name string) string      { return string(f[filepath.ToSlash(name)]) }
func (f files) GetBytes(name string) []byte { return f[filepath.ToSlash(name)] }

type apiVersions []string

func (a apiVersions) Has(v string) bool {
	for _, x := range a {
		if x == v {
			return true
		}
	}
	return false
}

// defaultAPIVersions: the built-in group versions `helm template` assumes (no cluster to ask).
var defaultAPIVersions = []string{
	"v1", "apps/v1", "batch/v1", "rbac.authorization.k8s.io/v1", "policy/v1", "networking.k8s.io/v1",
	"coordination.k8s.io/v1", "scheduling.k8s.io/v1", "storage.k8s.io/v1", "autoscaling/v2",
	"admissionregistration.k8s.io/v1", "apiextensions.k8s.io/v1", "events.k8s.io/v1", "discovery.k8s.io/v1",
}

type kubeVersion struct {
	Version, Major, Minor, GitVersion string
}

func (k kubeVersion) String() string { return k.Version }

func chartObject(meta map[string]interface{}) map[string]interface{} {
	// Helm exposes Chart.yaml's fields with capitalised names (.Chart.Name, .Chart.AppVersion ...).
	out := map[string]interface{}{}
	for k, v := range meta {
		if k == "" {
			continue
		}
		out[strings.ToUpper(k[:1])+k[1:]] = v
	}
	return out
}

// ---------------------------------------------------------------------------------------------- render

const recursionMax = 1000

func render(o options) (string, error) {
	chartDir := filepath.Clean(o.chart)
	meta, err := readYAMLMap(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		return "", fmt.Errorf("Chart.yaml: %v", err)
	}
	name, _ := meta["name"].(string)
	if name == "" {
		return "", errors.New("Chart.yaml: name is required")
	}
	kv, err := semver.NewVersion(o.kubeVersion)
	if err != nil {
		return "", fmt.Errorf("--kube-version %q: %v", o.kubeVersion, err)
	}
	if c, ok := meta["kubeVersion"].(string); ok && c != "" {
		constraint, err := semver.NewConstraint(c)
		if err != nil {
			return "", fmt.Errorf("Chart.yaml kubeVersion %q: %v", c, err)
		}
		if !constraint.Check(kv) {
			return "", fmt.Errorf("chart requires kubeVersion: %s which is incompatible with Kubernetes v%s", c, kv)
		}
	}
	values := map[string]interface{}{}
	if _, err := os.Stat(filepath.Join(chartDir, "values.yaml")); err == nil {
		if values, err = readYAMLMap(filepath.Join(chartDir, "values.yaml")); err != nil {
			return "", err
		}
	}
	for _, f := range o.valueFiles {
		extra, err := readYAMLMap(f)
		if err != nil {
			return "", fmt.Errorf("-f %v", err)
		}
		values = mergeValues(values, extra)
	}
	for _, s := range o.sets {
		if err := applySet(values, s); err != nil {
			return "", err
		}
	}
	// JSON round trip: int64 from --set and float64 from YAML behave alike in templates, as in Helm
	buf, _ := json.Marshal(values)
	values = map[string]interface{}{}
	_ = json.Unmarshal(buf, &values)

	allFiles := files{}
	var templates []string
	err = filepath.Walk(chartDir, func(path string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(chartDir, path)
		rel = filepath.ToSlash(rel)
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.HasPrefix(rel, "templates/") {
			templates = append(templates, rel)
		} else {
			allFiles[rel] = data
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	sort.Strings(templates)

	versions := append(apiVersions{}, defaultAPIVersions...)
	versions = append(versions, o.apiVersions...)
	top := map[string]interface{}{
		"Values":  values,
		"Release": map[string]interface{}{"Name": o.release, "Namespace": o.namespace, "IsInstall": true, "IsUpgrade": false, "Revision": 1, "Service": "Helm"},
		"Chart":   chartObject(meta),
		"Capabilities": map[string]interface{}{
			"KubeVersion": kubeVersion{Version: "v" + kv.String(), Major: strconv.FormatUint(kv.Major(), 10),
				Minor: strconv.FormatUint(kv.Minor(), 10), GitVersion: "v" + kv.String()},
			"APIVersions": versions,
			"HelmVersion": map[string]interface{}{"Version": "render-chart"},
		},
		"Files": allFiles,
	}

	root := template.New("gotpl").Option("missingkey=zero")
	includes := map[string]int{}
	funcs := sprig.TxtFuncMap()
	delete(funcs, "env")
	delete(funcs, "expandenv")
	funcs["toYaml"] = func(v interface{}) string {
		data, err := yaml.Marshal(v)
		if err != nil {
			return ""
		}
		return strings.TrimSuffix(string(data), "\n")
	}
	funcs["fromYaml"] = func(s string) map[string]interface{} {
		m := map[string]interface{}{}
		if err := yaml.Unmarshal([]byte(s), &m); err != nil {
			m["Error"] = err.Error()
		}
		return m
	}
	funcs["fromYamlArray"] = func(s string) []interface{} {
		a := []interface{}{}
		if err := yaml.Unmarshal([]byte(s), &a); err != nil {
			a = []interface{}{err.Error()}
		}
		return a
	}
	funcs["toJson"] = func(v interface{}) string {
		data, err := json.Marshal(v)
		if err != nil {
			return ""
		}
		return string(data)
	}
	funcs["fromJson"] = func(s string) map[string]interface{} {
		m := map[string]interface{}{}
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			m["Error"] = err.Error()
		}
		return m
	}
	funcs["required"] = func(msg string, v interface{}) (interface{}, error) {
		if v == nil {
			return v, errors.New(msg)
		}
		if s, ok := v.(string); ok && s == "" {
			return v, errors.New(msg)
		}
		return v, nil
	}
	funcs["lookup"] = func(string, string, string, string) (map[string]interface{}, error) {
		return map[string]interface{}{}, nil
	}
	funcs["include"] = func(name string, data interface{}) (string, error) {
		if includes[name] > recursionMax {
			return "", fmt.Errorf("rendering template has a nested reference name: %s", name)
		}
		includes[name]++
		defer func() { includes[name]-- }()
		var b bytes.Buffer
		if err := root.ExecuteTemplate(&b, name, data); err != nil {
			return "", err
		}
		return b.String(), nil
	}
	funcs["tpl"] = func(text string, data interface{}) (string, error) {
		t, err := root.Clone()
		if err != nil {
			return "", err
		}
		t, err = t.New("tpl").Parse(text)
		if err != nil {
			return "", fmt.Errorf("tpl: %v", err)
		}
		var b bytes.Buffer
		if err := t.Execute(&b, data); err != nil {
			return "", fmt.Errorf("tpl: %v", err)
		}
		return strings.ReplaceAll(b.String(), "<no value>", ""), nil
	}
	root.Funcs(funcs)
	for _, rel := range templates {
		data, _ := os.ReadFile(filepath.Join(chartDir, filepath.FromSlash(rel)))
		if _, err := root.New(name + "/" + rel).Parse(string(data)); err != nil {
			return "", err
		}
	}

	type doc struct {
		source, text, kind string
		order            int
	}
	var docs []doc
	for _, rel := range templates {
		base := filepath.Base(rel)
		if strings.HasPrefix(base, "_") || strings.HasSuffix(base, "NOTES.txt") {
			continue
		}
		scope := map[string]interface{}{}
		for k, v := range top {
			scope[k] = v
		}
		scope["Template"] = map[string]interface{}{"Name": name + "/" + rel, "BasePath": name + "/templates"}
		var b bytes.Buffer
		if err := root.ExecuteTemplate(&b, name+"/"+rel, scope); err != nil {
			return "", err
		}
		out := strings.ReplaceAll(b.String(), "<no value>", "")
		for _, part := range strings.Split("\n"+out, "\n---") {
			text := strings.TrimSpace(part)
			if text == "" {
				continue
			}
			var head struct {
				Kind     string `json:"kind"`
				Metadata struct {
					Name string `json:"name"`
				} `json:"metadata"`
			}
			if err := yaml.Unmarshal([]byte(text), &head); err != nil {
				return "", fmt.Errorf("YAML parse error on %s/%s: %v", name, rel, err)
			}
			if head.Kind == "" {
				if strings.TrimSpace(stripComments(text)) == "" {
					continue
				}
				return "", fmt.Errorf("%s/%s: object has no kind", name, rel)
			}
			docs = append(docs, doc{source: name + "/" + rel, text: text, kind: head.Kind, order: kindOrder(head.Kind)})
		}
	}
	sort.SliceStable(docs, func(i, j int) bool { return docs[i].order < docs[j].order })
	var b strings.Builder
	for _, d := range docs {
		fmt.Fprintf(&b, "---\n# Source: %s\n%s\n", d.source, d.text)
	}
	return b.String(), nil
}

func stripComments(s string) string {
	var b strings.Builder
	for _, line := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// installOrder: Helm's kind order for install (releaseutil.InstallOrder).
var installOrder = []string{
	"PriorityClass", "Namespace", "NetworkPolicy", "ResourceQuota", "LimitRange", "PodSecurityPolicy",
	"PodDisruptionBudget", "ServiceAccount", "Secret", "SecretList", "ConfigMap", "StorageClass",
	"PersistentVolume", "PersistentVolumeClaim", "CustomResourceDefinition", "ClusterRole", "ClusterRoleList",
	"ClusterRoleBinding", "ClusterRoleBindingList", "Role", "RoleList", "RoleBinding", "RoleBindingList",
	"Service", "DaemonSet", "Pod", "ReplicationController", "ReplicaSet", "Deployment",
	"HorizontalPodAutoscaler", "StatefulSet", "Job", "CronJob", "IngressClass", "Ingress", "APIService",
}

func kindOrder(kind string) int {
	for i, k := range installOrder {
		if k == kind {
			return i
		}
	}
	return len(installOrder)
}

func main() {
	out, err := render(parseArgs(os.Args[1:]))
	if err != nil {
		fmt.Fprintf(os.Stderr, "Error: %v\n", err)
		os.Exit(1)
	}
	fmt.Print(out)
}
