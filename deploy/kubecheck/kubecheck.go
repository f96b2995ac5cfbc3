// Package kubecheck checks inlet's deployment files with the real tools:
// the Helm chart (deploy/helm/inlet) through helm lint and helm template,
// every object it renders decoded strictly into client-go's typed API
// objects (the Prometheus Operator's for a ServiceMonitor), the plain manifests (deploy/kubernetes) against a fresh
// rendering, and the systemd unit (deploy/systemd). It is a module of its
// own so that helm and client-go stay out of inlet's.
package kubecheck

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
)

// scheme knows Kubernetes' own kinds and the Prometheus Operator's
// (monitoring.coreos.com/v1), whose ServiceMonitor the chart renders.
var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(monitoringv1.AddToScheme(s))
	return s
}()

// strict decodes YAML or JSON into the typed object of its apiVersion and
// kind, refusing unknown and duplicate fields (the API server's strict
// field validation).
var strict = kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, scheme, scheme,
	kjson.SerializerOptions{Yaml: true, Strict: true})

// Decode splits a multi-document YAML stream and decodes each document
// strictly into the typed object for its apiVersion and kind (client-go's,
// or the Prometheus Operator's). A kind neither knows, a field its type
// lacks, a value of the wrong type or a duplicate key is an error naming
// the document.
func Decode(manifest []byte) ([]runtime.Object, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(manifest)))
	var objs []runtime.Object
	for n := 1; ; n++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading document %d: %w", n, err)
		}
		if isEmpty(doc) {
			continue
		}
		obj, gvk, err := strict.Decode(doc, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("document %d (%s): %w", n, source(doc), err)
		}
		if gvk.Kind == "" {
			return nil, fmt.Errorf("document %d (%s): no kind", n, source(doc))
		}
		objs = append(objs, obj)
	}
}

// isEmpty reports whether a document holds only comments and blank lines.
func isEmpty(doc []byte) bool {
	for _, line := range strings.Split(string(doc), "\n") {
		if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "#") && l != "---" {
			return false
		}
	}
	return true
}

// source is the template helm names in a document's "# Source:" comment.
func source(doc []byte) string {
	if m := regexp.MustCompile(`(?m)^# Source: (\S+)`).FindSubmatch(doc); m != nil {
		return string(m[1])
	}
	return "no # Source line"
}

// ServeFlags reads the flag names (without dashes) from the output of
// `inlet serve -h`.
func ServeFlags(help []byte) map[string]bool {
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^  --?([a-z0-9][a-z0-9-]*)`).FindAllSubmatch(help, -1) {
		flags[string(m[1])] = true
	}
	return flags
}

// FlagOfEnv is the flag an INLET_* variable sets (INLET_MAX_BODY_BYTES →
// max-body-bytes), or "" for a name without the prefix.
func FlagOfEnv(name string) string {
	rest, ok := strings.CutPrefix(name, "INLET_")
	if !ok {
		return ""
	}
	return strings.ToLower(strings.ReplaceAll(rest, "_", "-"))
}
