package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/cairnstore/cairn/internal/cairnd"
	"github.com/cairnstore/cairn/internal/cli"
	"github.com/cairnstore/cairn/internal/helpflags"
	"github.com/cairnstore/cairn/internal/sidecar"
)

// The Prometheus Operator's two kinds, as local structs: decoding them
// strictly rejects any field they do not name, so a typo in one of the few
// fields the manifests use fails here. Their fields follow the CRDs of
// monitoring.coreos.com/v1; importing the operator's API module instead would
// add its dependency tree to this module for two small types.
type serviceMonitor struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Metadata   objectMeta `json:"metadata"`
	Spec       struct {
		Selector  labelSelector `json:"selector"`
		Endpoints []struct {
			Port          string `json:"port"`
			Path          string `json:"path"`
			Interval      string `json:"interval,omitempty"`
			ScrapeTimeout string `json:"scrapeTimeout,omitempty"`
		} `json:"endpoints"`
	} `json:"spec"`
}

type prometheusRule struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Metadata   objectMeta `json:"metadata"`
	Spec       struct {
		Groups []ruleGroup `json:"groups"`
	} `json:"spec"`
}

type ruleGroup struct {
	Name     string `json:"name"`
	Interval string `json:"interval,omitempty"`
	Rules    []struct {
		Alert       string            `json:"alert,omitempty"`
		Record      string            `json:"record,omitempty"`
		Expr        string            `json:"expr"`
		For         string            `json:"for,omitempty"`
		Labels      map[string]string `json:"labels,omitempty"`
		Annotations map[string]string `json:"annotations,omitempty"`
	} `json:"rules"`
}

type objectMeta struct {
	Name      string            `json:"name"`
	Namespace string            `json:"namespace,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
}

type labelSelector struct {
	MatchLabels map[string]string `json:"matchLabels"`
}

// objects is one kustomize build, decoded.
type objects struct {
	deployments     []appsv1.Deployment
	cronJobs        []batchv1.CronJob
	services        []corev1.Service
	configMaps      []corev1.ConfigMap
	serviceAccounts []corev1.ServiceAccount
	pdbs            []policyv1.PodDisruptionBudget
	networkPolicies []networkingv1.NetworkPolicy
	serviceMonitors []serviceMonitor
	prometheusRules []prometheusRule
}

// build runs kustomize (krusty, what kubectl kustomize runs) on dir and
// decodes every object strictly into its API type.
func build(t *testing.T, dir string) objects {
	t.Helper()
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), abs)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	out, err := m.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	var o objects
	for _, doc := range bytes.Split(out, []byte("\n---\n")) {
		var tm struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			t.Fatal(err)
		}
		var target any
		switch tm.APIVersion + " " + tm.Kind {
		case "apps/v1 Deployment":
			target = appendNew(&o.deployments)
		case "batch/v1 CronJob":
			target = appendNew(&o.cronJobs)
		case "v1 Service":
			target = appendNew(&o.services)
		case "v1 ConfigMap":
			target = appendNew(&o.configMaps)
		case "v1 ServiceAccount":
			target = appendNew(&o.serviceAccounts)
		case "policy/v1 PodDisruptionBudget":
			target = appendNew(&o.pdbs)
		case "networking.k8s.io/v1 NetworkPolicy":
			target = appendNew(&o.networkPolicies)
		case "monitoring.coreos.com/v1 ServiceMonitor":
			target = appendNew(&o.serviceMonitors)
		case "monitoring.coreos.com/v1 PrometheusRule":
			target = appendNew(&o.prometheusRules)
		default:
			t.Fatalf("%s: an object of %s %s, which this test does not know", dir, tm.APIVersion, tm.Kind)
		}
		if err := yaml.UnmarshalStrict(doc, target); err != nil {
			t.Errorf("%s: %s: %v", dir, tm.Kind, err)
		}
	}
	return o
}

// appendNew appends a zero value to *s and returns a pointer to it.
func appendNew[T any](s *[]T) *T {
	*s = append(*s, *new(T))
	return &(*s)[len(*s)-1]
}

func TestUnmarshalStrictRejectsATypo(t *testing.T) {
	var d appsv1.Deployment
	err := yaml.UnmarshalStrict([]byte("apiVersion: apps/v1\nkind: Deployment\nspec:\n  replica: 2\n"), &d)
	if err == nil || !strings.Contains(err.Error(), "replica") {
		t.Fatalf("a misspelt field decoded: %v", err)
	}
}

// The three builds an operator applies.
const (
	base       = "kubernetes"
	cronOnly   = "kubernetes/cronjob"
	regionsDir = "kubernetes/regions"
)

func regions(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(regionsDir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, filepath.Join(regionsDir, e.Name()))
	}
	if len(out) < 2 {
		t.Fatalf("regions: %v, want an overlay for each of at least two regions", out)
	}
	return out
}

// binaryFlags reads the flags of the built binary from its --help.
var binaryFlags = sync.OnceValues(func() (map[string][]helpflags.Flag, error) {
	dir, err := os.MkdirTemp("", "cairn-deploy")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := helpflags.Build(dir, "cairnd", "sweeper"); err != nil {
		return nil, err
	}
	out := map[string][]helpflags.Flag{}
	for _, b := range []string{"cairnd", "sweeper"} {
		help, err := helpflags.Help(filepath.Join(dir, b), "--help")
		if err != nil {
			return nil, err
		}
		if out[b], err = helpflags.Parse(help, ""); err != nil {
			return nil, fmt.Errorf("%s --help: %w", b, err)
		}
	}
	return out, nil
})

// served returns the paths the binary's HTTP mux registers, from its source.
func served(t *testing.T, binary string) []string {
	t.Helper()
	src := map[string]string{"cairnd": "../internal/server/server.go", "sweeper": "../internal/sidecar/http.go"}[binary]
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range regexp.MustCompile(`mux\.Handle(?:Func)?\("GET (/[a-z]+)"`).FindAllStringSubmatch(string(data), -1) {
		out = append(out, m[1])
	}
	if len(out) < 3 {
		t.Fatalf("%s serves %v: is the pattern still right?", src, out)
	}
	return out
}

// dockerTargets returns the targets of the Dockerfile with the binary each
// one's ENTRYPOINT runs.
func dockerTargets(t *testing.T) map[string]string {
	t.Helper()
	data, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	stage := ""
	for _, line := range strings.Split(string(data), "\n") {
		if m := regexp.MustCompile(`(?i)^FROM \S+ AS (\S+)`).FindStringSubmatch(line); m != nil {
			stage = m[1]
		}
		if m := regexp.MustCompile(`^ENTRYPOINT \["/usr/local/bin/([a-z-]+)"\]`).FindStringSubmatch(line); m != nil {
			out[stage] = m[1]
		}
	}
	return out
}

// secretVariables must come from a Secret, never from a value or an argument.
var secretVariables = []string{cli.EnvS3AccessKeyID, cli.EnvS3SecretAccessKey, cli.EnvS3SessionToken, "CAIRN_ETCD_PASSWORD", "CAIRN_TOKENS"}

// secretFlags must never be arguments.
var secretFlags = []string{"etcd-password", "tokens", "etcd-user"}

// checkContainer checks one container of cairnd or the sweeper against its
// binary, its image target, the ConfigMaps of the build (by name) and those
// of the pod's volumes (by volume name). A job's container runs to
// completion: it needs no probes.
func checkContainer(t *testing.T, c corev1.Container, cms, volumes map[string]corev1.ConfigMap, job bool) {
	t.Helper()
	flags, err := binaryFlags()
	if err != nil {
		t.Fatal(err)
	}
	// The image is the Dockerfile's target of the same name, and runs it.
	repo := c.Image
	if i := strings.LastIndex(repo, ":"); i > strings.LastIndex(repo, "/") {
		repo = repo[:i]
	}
	target := repo[strings.LastIndex(repo, "/")+1:]
	if entry, ok := dockerTargets(t)[target]; !ok || entry != c.Name {
		t.Fatalf("container %s: image %s is not the Dockerfile's target %q running /usr/local/bin/%s (targets: %v)", c.Name, c.Image, c.Name, c.Name, dockerTargets(t))
	}
	if len(c.Command) > 0 {
		t.Errorf("container %s overrides the image's entrypoint: %q", c.Name, c.Command)
	}
	fl, ok := flags[c.Name]
	if !ok {
		t.Fatalf("container %s: no binary of that name", c.Name)
	}
	variables := map[string]bool{cli.EnvS3AccessKeyID: true, cli.EnvS3SecretAccessKey: true, cli.EnvS3SessionToken: true}
	names := map[string]bool{}
	for _, f := range fl {
		names[f.Name] = true
		for _, v := range f.Env {
			variables[v] = true
		}
	}

	// The environment the binary sees: the ConfigMaps of envFrom, then env.
	env := map[string]string{}
	for _, ef := range c.EnvFrom {
		if ef.ConfigMapRef == nil {
			t.Errorf("container %s: envFrom other than a ConfigMap (Secrets go in env, one key each)", c.Name)
			continue
		}
		cm, ok := cms[ef.ConfigMapRef.Name]
		if !ok {
			t.Errorf("container %s: envFrom ConfigMap %s is not in the build", c.Name, ef.ConfigMapRef.Name)
		}
		for k, v := range cm.Data {
			if !variables[k] {
				t.Errorf("container %s: ConfigMap %s sets %s, which is no variable of %s", c.Name, cm.Name, k, c.Name)
			}
			env[k] = v
		}
	}
	for _, e := range c.Env {
		if !variables[e.Name] {
			t.Errorf("container %s: env %s is no variable of %s", c.Name, e.Name, c.Name)
		}
		if slices.Contains(secretVariables, e.Name) {
			if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
				t.Errorf("container %s: %s must come from a Secret (secretKeyRef)", c.Name, e.Name)
			}
			env[e.Name] = "from-a-secret"
			continue
		}
		if e.ValueFrom != nil {
			t.Errorf("container %s: %s from %+v; only secrets come from elsewhere", c.Name, e.Name, e.ValueFrom)
		}
		env[e.Name] = e.Value
	}
	for _, k := range secretVariables {
		if _, ok := cms[k]; ok {
			t.Errorf("a ConfigMap is named like the secret variable %s", k)
		}
	}
	for _, cm := range cms {
		for _, k := range secretVariables {
			if _, ok := cm.Data[k]; ok {
				t.Errorf("ConfigMap %s holds %s, a secret", cm.Name, k)
			}
		}
	}
	for _, a := range c.Args {
		name, ok := strings.CutPrefix(a, "--")
		if !ok {
			t.Errorf("container %s: argument %q is not a --flag", c.Name, a)
			continue
		}
		name, _, _ = strings.Cut(name, "=")
		if !names[name] {
			t.Errorf("container %s: --%s is no flag of %s", c.Name, name, c.Name)
		}
		if slices.Contains(secretFlags, name) {
			t.Errorf("container %s: --%s in the arguments; secrets come from Secrets", c.Name, name)
		}
	}

	// The binary's own parsing accepts the arguments and the environment.
	getenv := func(k string) string { return env[k] }
	switch c.Name {
	case "cairnd":
		if _, err := cairnd.Parse(c.Args, getenv, io.Discard); err != nil {
			t.Errorf("cairnd refuses the manifest's arguments and environment: %v", err)
		}
	case "sweeper":
		args := slices.Clone(c.Args)
		for i, a := range args {
			if path, ok := strings.CutPrefix(a, "--policy-file="); ok {
				args[i] = "--policy-file=" + policyFile(t, c, volumes, path)
			}
		}
		cfg, err := sidecar.Parse(args, getenv, io.Discard)
		if err == nil {
			err = cfg.Validate()
		}
		if err != nil {
			t.Errorf("the sweeper refuses the manifest's arguments and environment: %v", err)
		}
	}

	// Probes hit a path the binary serves on the port it listens on.
	listen := env[cli.EnvName("listen")]
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--listen="); ok {
			listen = v
		}
	}
	probes := map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe, "startup": c.StartupProbe}
	if c.LivenessProbe == nil && !job {
		t.Errorf("container %s has no liveness probe", c.Name)
	}
	for kind, p := range probes {
		if p == nil {
			continue
		}
		if p.HTTPGet == nil {
			t.Errorf("container %s: the %s probe is not an HTTP GET", c.Name, kind)
			continue
		}
		if !slices.Contains(served(t, c.Name), p.HTTPGet.Path) {
			t.Errorf("container %s: the %s probe's path %s is not one %s serves (%v)", c.Name, kind, p.HTTPGet.Path, c.Name, served(t, c.Name))
		}
		port := containerPort(t, c, p.HTTPGet.Port.String())
		_, lp, err := net.SplitHostPort(listen)
		if err != nil || lp != strconv.Itoa(int(port)) {
			t.Errorf("container %s: the %s probe's port %d is not the --listen port (%q)", c.Name, kind, port, listen)
		}
	}

	// Requests and a memory limit, so the scheduler and the OOM killer know.
	r := c.Resources
	if r.Requests.Cpu().IsZero() || r.Requests.Memory().IsZero() || r.Limits.Memory().IsZero() {
		t.Errorf("container %s: resources %+v, want cpu and memory requests and a memory limit", c.Name, r)
	}
}

// containerPort resolves a probe's or Service's port, a number or a name.
func containerPort(t *testing.T, c corev1.Container, port string) int32 {
	t.Helper()
	if n, err := strconv.Atoi(port); err == nil {
		return int32(n)
	}
	for _, p := range c.Ports {
		if p.Name == port {
			return p.ContainerPort
		}
	}
	t.Errorf("container %s has no port named %q", c.Name, port)
	return 0
}

// policyFile writes the file that the container finds at path, from the
// ConfigMap volume mounted above it, to a temporary file for the sweeper.
func policyFile(t *testing.T, c corev1.Container, volumes map[string]corev1.ConfigMap, path string) string {
	t.Helper()
	for _, m := range c.VolumeMounts {
		rel, err := filepath.Rel(m.MountPath, path)
		if err != nil || strings.HasPrefix(rel, "..") {
			continue
		}
		cm, ok := volumes[m.Name]
		if !ok {
			continue
		}
		data, ok := cm.Data[rel]
		if !ok {
			t.Fatalf("container %s: ConfigMap %s has no key %s for %s", c.Name, cm.Name, rel, path)
		}
		f := filepath.Join(t.TempDir(), rel)
		if err := os.WriteFile(f, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	t.Fatalf("container %s: no ConfigMap volume is mounted above %s", c.Name, path)
	return ""
}

// checkPod checks a pod template of the build: its containers, and that its
// volumes name ConfigMaps of the build.
func checkPod(t *testing.T, spec corev1.PodSpec, cms map[string]corev1.ConfigMap, job bool) {
	t.Helper()
	volumes := map[string]corev1.ConfigMap{}
	for _, v := range spec.Volumes {
		if v.ConfigMap == nil {
			continue
		}
		cm, ok := cms[v.ConfigMap.Name]
		if !ok {
			t.Errorf("volume %s: ConfigMap %s is not in the build", v.Name, v.ConfigMap.Name)
		}
		volumes[v.Name] = cm
	}
	for _, c := range spec.Containers {
		checkContainer(t, c, cms, volumes, job)
	}
	if spec.SecurityContext == nil || spec.SecurityContext.RunAsNonRoot == nil || !*spec.SecurityContext.RunAsNonRoot {
		t.Error("the pod does not require a non-root user")
	}
}

func configMaps(o objects) map[string]corev1.ConfigMap {
	out := map[string]corev1.ConfigMap{}
	for _, cm := range o.configMaps {
		out[cm.Name] = cm
	}
	return out
}

// checkSelectors checks that the Service, the PodDisruptionBudget, the
// NetworkPolicy and the ServiceMonitor select cairnd's pods, and that the
// named ports they use exist.
func checkSelectors(t *testing.T, o objects) {
	t.Helper()
	if len(o.deployments) != 1 || len(o.services) != 1 || len(o.pdbs) != 1 || len(o.networkPolicies) != 1 || len(o.serviceMonitors) != 1 || len(o.serviceAccounts) != 1 {
		t.Fatalf("want one Deployment, Service, PodDisruptionBudget, NetworkPolicy, ServiceMonitor and ServiceAccount, got %d, %d, %d, %d, %d, %d",
			len(o.deployments), len(o.services), len(o.pdbs), len(o.networkPolicies), len(o.serviceMonitors), len(o.serviceAccounts))
	}
	d := o.deployments[0]
	pod := labels.Set(d.Spec.Template.Labels)
	if sel := labels.SelectorFromSet(d.Spec.Selector.MatchLabels); !sel.Matches(pod) {
		t.Errorf("the Deployment's selector does not match its pods")
	}
	svc := o.services[0]
	for name, sel := range map[string]map[string]string{
		"Service": svc.Spec.Selector, "PodDisruptionBudget": o.pdbs[0].Spec.Selector.MatchLabels,
		"NetworkPolicy": o.networkPolicies[0].Spec.PodSelector.MatchLabels,
	} {
		if len(sel) == 0 || !labels.SelectorFromSet(sel).Matches(pod) {
			t.Errorf("the %s's selector %v does not select cairnd's pods %v", name, sel, pod)
		}
	}
	if sm := o.serviceMonitors[0]; !labels.SelectorFromSet(sm.Spec.Selector.MatchLabels).Matches(labels.Set(svc.Labels)) {
		t.Errorf("the ServiceMonitor's selector %v does not select the Service %v", sm.Spec.Selector.MatchLabels, svc.Labels)
	}
	if sa := d.Spec.Template.Spec.ServiceAccountName; sa != o.serviceAccounts[0].Name {
		t.Errorf("the pods run as %q, not the ServiceAccount %q", sa, o.serviceAccounts[0].Name)
	}
	// Every Service port reaches a named container port, and the
	// ServiceMonitor scrapes /metrics of Service ports.
	ports := map[string]corev1.Container{}
	for _, c := range d.Spec.Template.Spec.Containers {
		for _, p := range c.Ports {
			ports[p.Name] = c
		}
	}
	svcPorts := map[string]string{}
	for _, p := range svc.Spec.Ports {
		c, ok := ports[p.TargetPort.String()]
		if !ok {
			t.Errorf("Service port %s targets %s, no container port", p.Name, p.TargetPort.String())
			continue
		}
		svcPorts[p.Name] = c.Name
	}
	for _, e := range o.serviceMonitors[0].Spec.Endpoints {
		binary, ok := svcPorts[e.Port]
		if !ok {
			t.Errorf("the ServiceMonitor scrapes port %q, which the Service lacks", e.Port)
			continue
		}
		if !slices.Contains(served(t, binary), e.Path) {
			t.Errorf("the ServiceMonitor scrapes %s on %s's port, which %s does not serve", e.Path, binary, binary)
		}
	}
	// The NetworkPolicy lets the API port in.
	api := int32(0)
	for _, p := range svc.Spec.Ports {
		if p.Name == "http" {
			api = p.Port
		}
	}
	open := false
	for _, r := range o.networkPolicies[0].Spec.Ingress {
		for _, p := range r.Ports {
			if p.Port != nil && p.Port.IntValue() == int(api) {
				open = true
			}
		}
	}
	if api == 0 || !open {
		t.Errorf("the NetworkPolicy does not let the API port %d in", api)
	}
}

func TestKubernetesBase(t *testing.T) {
	o := build(t, base)
	checkSelectors(t, o)
	d := o.deployments[0]
	var names []string
	for _, c := range d.Spec.Template.Spec.Containers {
		names = append(names, c.Name)
	}
	if !slices.Equal(names, []string{"cairnd", "sweeper"}) {
		t.Errorf("the pod runs %v, want cairnd with the sweeper as a sidecar", names)
	}
	checkPod(t, d.Spec.Template.Spec, configMaps(o), false)
	if len(o.cronJobs) != 0 {
		t.Errorf("the base has %d CronJobs: the sweeper runs as the sidecar there", len(o.cronJobs))
	}
	// The sidecar's --interval is the one the alert thresholds assume.
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name == "sweeper" && !slices.Contains(c.Args, "--interval=1h") {
			t.Errorf("the sidecar runs %q; alerts.yml's windows assume --interval=1h", c.Args)
		}
	}
	if d.Spec.Template.Spec.TerminationGracePeriodSeconds == nil || *d.Spec.Template.Spec.TerminationGracePeriodSeconds <= 30 {
		t.Error("the termination grace period does not outlast cairnd's --shutdown-timeout (30s)")
	}

	// The PrometheusRule is alerts.yml, and its metrics are the sweeper's.
	if len(o.prometheusRules) != 1 {
		t.Fatalf("%d PrometheusRules, want 1", len(o.prometheusRules))
	}
	data, err := os.ReadFile("alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var alerts struct {
		Groups []ruleGroup `json:"groups"`
	}
	if err := yaml.UnmarshalStrict(data, &alerts); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(alerts.Groups, o.prometheusRules[0].Spec.Groups) {
		a, _ := json.MarshalIndent(alerts.Groups, "", " ")
		b, _ := json.MarshalIndent(o.prometheusRules[0].Spec.Groups, "", " ")
		t.Errorf("kubernetes/base/prometheusrule.yaml's groups differ from alerts.yml's: copy them over\nalerts.yml:\n%s\nprometheusrule.yaml:\n%s", a, b)
	}
	have := exported(t)
	for _, g := range o.prometheusRules[0].Spec.Groups {
		for _, r := range g.Rules {
			for _, n := range metricName.FindAllString(r.Expr, -1) {
				if !have[n] {
					t.Errorf("rule %s uses %s, which the sweeper does not export", r.Alert, n)
				}
			}
		}
	}

	// Each secret the manifests name is one docs/kubernetes.md creates.
	guide, err := os.ReadFile("../docs/kubernetes.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range secretNames(d.Spec.Template.Spec) {
		if !strings.Contains(string(guide), "kubectl create secret generic "+s+" ") {
			t.Errorf("Secret %s: docs/kubernetes.md does not say how to create it", s)
		}
	}
}

// secretNames returns the Secrets a pod uses, as volumes or env.
func secretNames(spec corev1.PodSpec) []string {
	var out []string
	add := func(s string) {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	for _, v := range spec.Volumes {
		if v.Secret != nil {
			add(v.Secret.SecretName)
		}
	}
	for _, c := range spec.Containers {
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				add(e.ValueFrom.SecretKeyRef.Name)
			}
		}
	}
	slices.Sort(out)
	return out
}

func TestKubernetesCronJob(t *testing.T) {
	o := build(t, cronOnly)
	checkSelectors(t, o)
	d := o.deployments[0]
	if n := len(d.Spec.Template.Spec.Containers); n != 1 || d.Spec.Template.Spec.Containers[0].Name != "cairnd" {
		t.Errorf("the cronjob variant's pod runs %d containers, want cairnd alone", n)
	}
	checkPod(t, d.Spec.Template.Spec, configMaps(o), false)
	if len(o.cronJobs) != 1 {
		t.Fatalf("%d CronJobs, want the sweeper's", len(o.cronJobs))
	}
	cj := o.cronJobs[0]
	spec := cj.Spec.JobTemplate.Spec.Template.Spec
	if len(spec.Containers) != 1 || spec.Containers[0].Name != "sweeper" || !slices.Contains(spec.Containers[0].Args, "--once") {
		t.Fatalf("the CronJob runs %+v, want the sweeper with --once", spec.Containers)
	}
	if cj.Spec.ConcurrencyPolicy != batchv1.ForbidConcurrent || spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("the CronJob: concurrencyPolicy %s, restartPolicy %s; want Forbid and Never", cj.Spec.ConcurrencyPolicy, spec.RestartPolicy)
	}
	checkPod(t, spec, configMaps(o), true)
	if len(o.prometheusRules) != 0 || len(o.serviceMonitors[0].Spec.Endpoints) != 1 || len(o.services[0].Spec.Ports) != 1 {
		t.Error("the cronjob variant still scrapes or alerts on a sweeper that serves no metrics")
	}
	if !reflect.DeepEqual(secretNames(spec), []string{"cairn-etcd-client", "cairn-r2"}) {
		t.Errorf("the CronJob uses the Secrets %v", secretNames(spec))
	}
}

func TestKubernetesRegions(t *testing.T) {
	seen := map[string]string{}
	for _, dir := range regions(t) {
		region := filepath.Base(dir)
		o := build(t, dir)
		checkSelectors(t, o)
		d := o.deployments[0]
		checkPod(t, d.Spec.Template.Spec, configMaps(o), false)
		if d.Labels["topology.kubernetes.io/region"] != region {
			t.Errorf("%s: the Deployment's region label is %q", dir, d.Labels["topology.kubernetes.io/region"])
		}
		// Both containers read the region's etcd member, and only it.
		for _, c := range d.Spec.Template.Spec.Containers {
			var endpoints string
			for _, ef := range c.EnvFrom {
				if cm, ok := configMaps(o)[ef.ConfigMapRef.Name]; ok {
					if v, ok := cm.Data["CAIRN_ETCD_ENDPOINTS"]; ok {
						endpoints = v
					}
				}
			}
			if strings.Contains(endpoints, ",") || !strings.Contains(endpoints, region) {
				t.Errorf("%s: %s reaches etcd at %q, want the region's own member alone", dir, c.Name, endpoints)
			}
			if other, ok := seen[endpoints]; ok && other != region {
				t.Errorf("regions %s and %s share the etcd endpoint %s", other, region, endpoints)
			}
			seen[endpoints] = region
		}
	}
}
