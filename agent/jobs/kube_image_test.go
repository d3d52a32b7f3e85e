package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"io/fs"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	sigstoresig "github.com/sigstore/sigstore/pkg/signature"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"nuon.dev/nuon/builder"
	"nuon.dev/nuon/internal/oci"
	"nuon.dev/nuon/plugin"
	"nuon.dev/nuon/plugin/plugintest"
	"nuon.dev/nuon/schemas"
)

// spyPlugin is a plugin that answers an apply with what it can see from
// inside its container: every file, its environment's names, its user,
// and whether it can write its root or its request.
const spyPlugin = `#!/usr/bin/perl
use strict;
use warnings;
use JSON::PP;
local $/;
my $req = decode_json(<STDIN>);
my @files;
sub walk {
	my ($d) = @_;
	opendir(my $dh, $d) or return;
	for my $e (readdir $dh) {
		next if $e eq '.' || $e eq '..';
		my $p = $d eq '/' ? "/$e" : "$d/$e";
		if (!-l $p && -d $p) { walk($p) } else { push @files, $p }
	}
	closedir $dh;
}
walk('/');
my @leaks;
for my $f (grep { m{^/nuon/plugin/in/} } @files) {
	open(my $h, '<', $f) or next;
	my $c = <$h>;
	for my $k (grep { /^(NUON_SECRET_|AWS_)/ } keys %ENV) { push @leaks, "$f:$k" if defined $c && index($c, $ENV{$k}) >= 0 }
}
my $root = open(my $a, '>', '/spy-was-here') ? 1 : 0;
my $in = open(my $b, '>', '/nuon/plugin/in/spy-was-here') ? 1 : 0;
print encode_json({apiVersion => 'nuon.dev/v1', kind => 'PluginResponse', protocol => 1,
	operation => $req->{operation}, changed => JSON::PP::false,
	outputs => {files => \@files, env => [sort keys %ENV], uid => $< + 0, rootWritable => $root, inWritable => $in, leaks => \@leaks}});
`

// release releases the plugin directory dir, its manifest edited by edit,
// as `nuon plugin release --image-base` does: its artifact signed with
// key, its image on base signed with imageKey (nil: unsigned).
func (r *pluginRegistry) release(t testing.TB, dir string, edit func(string) string, base v1.Image, key, imageKey sigstoresig.SignerVerifier) (art, img name.Digest) {
	t.Helper()
	tmp := editedPlugin(t, dir, edit)
	a, _, err := plugin.Package(tmp)
	if err != nil {
		t.Fatal(err)
	}
	ad, _ := a.Digest()
	im, _, err := plugin.PackageImage(tmp, base, ad)
	if err != nil {
		t.Fatal(err)
	}
	push := func(i v1.Image, key sigstoresig.SignerVerifier) name.Digest {
		d, _ := i.Digest()
		ref := r.repo.Digest(d.String())
		p, err := r.c.NewPusher(t.Context(), r.repo)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Push(t.Context(), ref, i); err != nil {
			t.Fatal(err)
		}
		if key != nil {
			if _, err := builder.Sign(t.Context(), r.c, ref, key); err != nil {
				t.Fatal(err)
			}
		}
		return ref
	}
	return push(a, key), push(im, imageKey)
}

// imageAdmission is Kube.AdmitPluginImage as the agent wires it.
func (r *pluginRegistry) imageAdmission() PluginImageAdmission {
	return func(ctx context.Context, job *schemas.Job) (*plugin.Image, schemas.PluginCapabilities, error) {
		return plugin.AdmitImage(ctx, r.c, job, r.verify)
	}
}

// imageJob is pluginJob pinning the plugin's image too.
func imageJob(id, plug string, art, img name.Digest, grants schemas.PluginCapabilities) *schemas.Job {
	j := pluginJob(id, art, grants)
	j.Plugin = plug
	j.Artifacts = append(j.Artifacts, schemas.Artifact{Name: schemas.PluginImageArtifactName, Local: img.String(), Digest: img.DigestStr(),
		MediaType: "application/vnd.oci.image.manifest.v1+json"})
	return j
}

// imageCluster is newPluginCluster with the image form on: the plugin's
// zone directory its own /tmp.
func imageCluster(t testing.TB, reg *pluginRegistry) (*pluginCluster, *Kube) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the test kubelet runs a plugin's image in a root of its own: chroot and mounts need root")
	}
	if _, err := exec.LookPath("perl"); err != nil {
		t.Skip("no perl")
	}
	pluginExecutor(t)
	pc := newPluginCluster(t, reg)
	k := *pc.k
	k.Env = []corev1.EnvVar{{Name: "NUON_ZONE_DIR", Value: "/tmp"}, {Name: "NOT_GRANTED", Value: "not-granted-value"}}
	k.AdmitPluginImage = reg.imageAdmission()
	return pc, &k
}

// stagingVolume makes the folder work the agent's workdir as the jobs see
// it, as --job-state-claim does: a claim in ns, bound to a hostPath
// PersistentVolume of work (the restricted namespace admits a claim,
// never a hostPath volume), mounted at work.
func stagingVolume(t testing.TB, cs kubernetes.Interface, ns, work string) ([]corev1.Volume, []corev1.VolumeMount) {
	t.Helper()
	ctx := t.Context()
	size := resource.MustParse("1Gi")
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "nuon-work"}, Spec: corev1.PersistentVolumeSpec{
		Capacity:                      corev1.ResourceList{corev1.ResourceStorage: size},
		AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
		PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
		StorageClassName:              "",
		ClaimRef:                      &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: ns, Name: "nuon-work"},
		PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: work, Type: ptr.To(corev1.HostPathDirectory)}},
	}}
	if _, err := cs.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "nuon-work", Namespace: ns}, Spec: corev1.PersistentVolumeClaimSpec{
		AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
		StorageClassName: ptr.To(""),
		VolumeName:       "nuon-work",
		Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
	}}
	if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The kubelet mounts a claim once it is bound (the controller
	// manager's binder).
	deadline := time.Now().Add(time.Minute)
	for {
		c, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "nuon-work", metav1.GetOptions{})
		if err == nil && c.Status.Phase == corev1.ClaimBound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("claim nuon-work not bound: %v %+v", err, c)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return []corev1.Volume{{Name: "nuon-work", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "nuon-work"}}}},
		[]corev1.VolumeMount{{Name: "nuon-work", MountPath: work}}
}

// egressOf is the egress of the NetworkPolicy of job id, which must be
// the only one.
func egressOf(t testing.TB, cs kubernetes.Interface, id string) *networkingv1.NetworkPolicy {
	t.Helper()
	nps, err := cs.NetworkingV1().NetworkPolicies(pluginNamespace).List(t.Context(), metav1.ListOptions{LabelSelector: LabelJob + "=" + idHash(id)})
	if err != nil || len(nps.Items) != 1 {
		t.Fatalf("the NetworkPolicies of job %s: %v, %d", id, err, len(nps.Items))
	}
	return &nps.Items[0]
}

// checkDeniesAll fails unless np, as the API server keeps it, lets
// nothing in and nothing out: both policy types, no rule.
func checkDeniesAll(t testing.TB, np *networkingv1.NetworkPolicy) {
	t.Helper()
	types := slices.Clone(np.Spec.PolicyTypes)
	slices.Sort(types)
	if !slices.Equal(types, []networkingv1.PolicyType{networkingv1.PolicyTypeEgress, networkingv1.PolicyTypeIngress}) || len(np.Spec.Egress) != 0 || len(np.Spec.Ingress) != 0 {
		t.Errorf("NetworkPolicy %s: types %v, egress %+v, ingress %+v; want both types and no rule: no DNS, no registry, nothing", np.Name, np.Spec.PolicyTypes, np.Spec.Egress, np.Spec.Ingress)
	}
	if len(np.Spec.PodSelector.MatchLabels) == 0 && len(np.Spec.PodSelector.MatchExpressions) == 0 {
		t.Errorf("NetworkPolicy %s selects every pod of the namespace", np.Name)
	}
}

// checkUnstaged fails if the job's staged directory is left.
func checkUnstaged(t testing.TB, dir string) {
	t.Helper()
	if _, err := os.Lstat(StagedDir(dir)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the staged directory %s is left: %v", StagedDir(dir), err)
	}
}

// TestKubePluginImage runs the zonefile plugin (a Perl script) from its
// container image, released on a perl base, as the Kubernetes runner's
// image form does, against the real API server and controller manager,
// with the test kubelet running the image in a root of its own: the
// job's result, the zone file it wrote in its own /tmp, the pod's shape
// (the plugin's container holds no credential, no key, no nuon), what a
// spy plugin sees from inside its container, and the attacks that must
// leave no object: an image pinned by another digest, unsigned, signed by
// another key, the release of another artifact, or asking for more than
// granted.
func TestKubePluginImage(t *testing.T) {
	reg := newPluginRegistry(t)
	pc, k := imageCluster(t, reg)
	base, err := plugintest.HostImageList("../../fixtures/plugins/zonefile-base.txt")
	if err != nil {
		t.Fatal(err)
	}
	same := func(s string) string { return s }
	art, img := reg.release(t, zonefileDir, same, base, reg.vendor, reg.vendor)
	zone := schemas.PluginCapabilities{Env: []string{"NUON_ZONE_DIR"}}
	cloud := []string{"AWS_ACCESS_KEY_ID=ASIAPLUGINTEST0001", "AWS_SECRET_ACCESS_KEY=cloud-secret-value-0001"}

	job := imageJob("dns-g1-update-image", "zonefile", art, img, zone)
	start := time.Now()
	res, err := k.RunEnv(t.Context(), job, pc.jobDir(job.ID), cloud)
	if err != nil {
		t.Fatalf("RunEnv: %v\n%s\n%s", err, pc.kl.log(KubeName(job.ID)), pc.log.String())
	}
	t.Logf("a plugin job in the image form through the kubernetes runner and the test kubelet: %s", time.Since(start).Round(time.Millisecond))
	if !res.Changed || res.Outputs["records"] != float64(1) || res.Outputs["zone_file"] != "/tmp/"+job.ID+".internal.zone" {
		t.Errorf("result %+v", res)
	}
	pod := jobPod(t, pc.cs, pluginNamespace, job.ID)
	z, err := os.ReadFile(filepath.Join(pc.kl.root, pod.Name, "volumes", "plugin-tmp", job.ID+".internal.zone"))
	if err != nil || !strings.Contains(string(z), "api\t300\tIN\tA\t10.0.0.1") {
		t.Errorf("the zone file in the plugin's /tmp: %v\n%s", err, z)
	}

	checkUnstaged(t, pc.jobDir(job.ID))

	t.Run("an orphaned run recovered", func(t *testing.T) {
		// The agent died after the Job finished, before it collected the
		// result and removed what it staged.
		dir := pc.jobDir(job.ID)
		if err := os.Remove(filepath.Join(dir, ResultFile)); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(StagedDir(dir), "artifacts"), 0o755); err != nil {
			t.Fatal(err)
		}
		res, err := k.Recover(t.Context(), dir)
		if err != nil || res.Outputs["records"] != float64(1) {
			t.Fatalf("Recover = %+v, %v", res, err)
		}
		checkUnstaged(t, dir)

		// A run that never got its Job: nothing to wait for.
		lost := imageJob("dns-g1-update-i-lost", "zonefile", art, img, zone)
		dir = pc.jobDir(lost.ID)
		if err := os.MkdirAll(StagedDir(dir), 0o755); err != nil {
			t.Fatal(err)
		}
		lost.ResultFile = filepath.Join(dir, ResultFile)
		b, _ := json.Marshal(lost)
		if err := os.WriteFile(filepath.Join(dir, ManifestFile), b, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := k.Recover(t.Context(), dir); !errors.Is(err, ErrNotFinished) {
			t.Errorf("Recover = %v, want %v", err, ErrNotFinished)
		}
		checkUnstaged(t, dir)
	})

	t.Run("the pod", func(t *testing.T) {
		if len(pod.Spec.InitContainers) != 2 || pod.Spec.InitContainers[0].Image != k.Image || pod.Spec.InitContainers[1].Image != img.String() {
			t.Fatalf("init containers %+v", pod.Spec.InitContainers)
		}
		// The executor's container copies a file: no network, no
		// credential, nothing mounted but where it copies to.
		ex := pod.Spec.InitContainers[0]
		if ex.Name != executorContainer || len(ex.Env) != 0 || len(ex.EnvFrom) != 0 || len(ex.VolumeMounts) != 1 || ex.VolumeMounts[0].MountPath != PodPluginBin {
			t.Errorf("the executor's container: %+v", ex)
		}
		if ptr.Deref(pod.Spec.EnableServiceLinks, true) {
			t.Error("the pod has the Services' addresses in its environment (enableServiceLinks)")
		}
		checkDeniesAll(t, egressOf(t, pc.cs, job.ID))
		// The staged directory alone, read-only, where the agent wrote
		// it: the same subPath for the plugin and the job.
		rel, _ := filepath.Rel(pc.work, StagedDir(pc.jobDir(job.ID)))
		for _, c := range []corev1.Container{pod.Spec.InitContainers[1], pod.Spec.Containers[0]} {
			i := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == PodPluginIn })
			if i < 0 || c.VolumeMounts[i].Name != "nuon-work" || c.VolumeMounts[i].SubPath != rel || !c.VolumeMounts[i].ReadOnly {
				t.Errorf("container %s mounts %s as %+v; want nuon-work's %s, read-only", c.Name, PodPluginIn, c.VolumeMounts, rel)
			}
		}
		pl := pod.Spec.InitContainers[1]
		if len(pl.EnvFrom) != 0 {
			t.Errorf("the plugin's container takes its environment from %+v", pl.EnvFrom)
		}
		var names []string
		for _, e := range pl.Env {
			names = append(names, e.Name)
		}
		slices.Sort(names)
		if want := []string{"HOME", "LANG", "NUON_PLUGIN_PROTOCOL", "NUON_ZONE_DIR", "TMPDIR"}; !slices.Equal(names, want) {
			t.Errorf("the plugin's environment %v, want %v", names, want)
		}
		for _, m := range pl.VolumeMounts {
			if m.Name == "registry" || m.Name == "manifest" || (m.Name == "nuon-work" && m.MountPath != PodPluginIn) {
				t.Errorf("the plugin's container mounts %s at %s", m.Name, m.MountPath)
			}
			if (m.MountPath == PodPluginIn || m.MountPath == PodPluginBin) && !m.ReadOnly {
				t.Errorf("the plugin's container may write %s", m.MountPath)
			}
		}
		for _, c := range append(slices.Clone(pod.Spec.InitContainers), pod.Spec.Containers...) {
			sc := c.SecurityContext
			if sc == nil || !ptr.Deref(sc.ReadOnlyRootFilesystem, false) || ptr.Deref(sc.AllowPrivilegeEscalation, true) {
				t.Errorf("container %s: security context %+v", c.Name, sc)
			}
		}
		for _, c := range append(slices.Clone(pod.Spec.InitContainers), pod.Spec.Containers...) {
			for _, e := range c.Env {
				if strings.HasPrefix(e.Name, "NUON_REGISTRY") {
					t.Errorf("container %s has %s", c.Name, e.Name)
				}
			}
		}
		for _, v := range pod.Spec.Volumes {
			if v.Secret != nil {
				t.Errorf("the pod mounts Secret %s", v.Secret.SecretName)
			}
		}
		// Kube.PluginCommand: no registry flag (its CA file is in a
		// Secret this pod does not mount).
		if slices.Contains(pod.Spec.Containers[0].Command, "--registry-ca") {
			t.Errorf("the job's container runs %v", pod.Spec.Containers[0].Command)
		}
		if len(pod.Spec.Containers[0].EnvFrom) != 0 || ptr.Deref(pod.Spec.AutomountServiceAccountToken, true) {
			t.Errorf("the job's container: %+v, token %v", pod.Spec.Containers[0].EnvFrom, pod.Spec.AutomountServiceAccountToken)
		}
		// The same pod, made to escape, is refused by the namespace.
		tampered := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "tampered", Namespace: pluginNamespace}, Spec: *pod.Spec.DeepCopy()}
		tampered.Spec.NodeName = ""
		tampered.Spec.InitContainers[1].SecurityContext.RunAsUser = ptr.To[int64](0)
		if _, err := pc.cs.CoreV1().Pods(pluginNamespace).Create(t.Context(), tampered, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err == nil || !strings.Contains(err.Error(), "violates PodSecurity") {
			t.Errorf("the plugin's container as root was not refused: %v", err)
		}
	})

	t.Run("what the plugin sees", func(t *testing.T) {
		spyDir := filepath.Join(t.TempDir(), "spy")
		if err := os.MkdirAll(spyDir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(spyDir, "spy"), []byte(spyPlugin), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(spyDir, plugin.ManifestFile), []byte(`{"apiVersion": "nuon.dev/v1", "kind": "Plugin", "name": "spy",
  "version": "1.0.0", "protocols": [1], "operations": ["apply"], "capabilities": {"network": true, "secrets": true, "cloudRole": true}, "executables": {"linux/amd64": "spy"}}`), 0o644); err != nil {
			t.Fatal(err)
		}
		sa, si := reg.release(t, spyDir, same, base, reg.vendor, reg.vendor)
		spy := imageJob("spy-g1-update-image", "spy", sa, si, schemas.PluginCapabilities{Network: true, Secrets: true, CloudRole: true})
		res, err := k.RunEnv(t.Context(), spy, pc.jobDir(spy.ID), cloud)
		if err != nil {
			t.Fatalf("RunEnv: %v\n%s", err, pc.kl.log(KubeName(spy.ID)))
		}
		files, _ := res.Outputs["files"].([]any)
		if len(files) < 100 {
			t.Fatalf("the spy saw %d files: %+v", len(files), res.Outputs)
		}
		exe, _ := os.Executable()
		for _, f := range files {
			f, _ := f.(string)
			base := filepath.Base(f)
			if base == "nuon" || base == filepath.Base(exe) || strings.HasPrefix(f, "/nuon/registry") || strings.HasPrefix(f, "/nuon/manifest") ||
				strings.HasPrefix(f, "/var/lib/nuon") || base == "ca.crt" || base == "password" {
				t.Errorf("the plugin's container holds %s", f)
			}
		}
		if !slices.Contains(files, any("/nuon/plugin/bin/nuon-plugin-exec")) || !slices.Contains(files, any("/nuon/plugin/in/request.json")) {
			t.Errorf("the spy did not see its executor and request: a walk that misses them proves nothing")
		}
		env, _ := res.Outputs["env"].([]any)
		for _, e := range env {
			if e, _ := e.(string); strings.HasPrefix(e, "NUON_REGISTRY") || e == "NOT_GRANTED" || e == "KUBECONFIG" {
				t.Errorf("the plugin's container has %s in its environment", e)
			}
		}
		if res.Outputs["rootWritable"] != float64(0) || res.Outputs["inWritable"] != float64(0) || res.Outputs["uid"] != float64(PluginUser) {
			t.Errorf("root writable %v, request writable %v, uid %v", res.Outputs["rootWritable"], res.Outputs["inWritable"], res.Outputs["uid"])
		}
		// Granted secrets and the cloud role, the spy holds their values
		// and found none of them in what the agent staged.
		if !slices.Contains(env, any("NUON_SECRET_TOKEN")) || !slices.Contains(env, any("AWS_SECRET_ACCESS_KEY")) {
			t.Errorf("the spy lacks the secrets it was granted (%v): its search of the staged files proves nothing", env)
		}
		if leaks, _ := res.Outputs["leaks"].([]any); len(leaks) != 0 {
			t.Errorf("secrets in the staged files: %v", leaks)
		}
		// Granted the network: all egress, and only then.
		if np := egressOf(t, pc.cs, spy.ID); len(np.Spec.Egress) != 1 || len(np.Spec.Egress[0].To) != 0 || len(np.Spec.Egress[0].Ports) != 0 {
			t.Errorf("the network granted, egress %+v", np.Spec.Egress)
		}
		checkUnstaged(t, pc.jobDir(spy.ID))
	})

	t.Run("a failed run leaves nothing staged", func(t *testing.T) {
		failDir := filepath.Join(t.TempDir(), "fails")
		if err := os.MkdirAll(failDir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(failDir, "fails"), []byte("#!/usr/bin/perl\nprint STDERR \"fails on purpose\\n\";\nexit 3;\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(failDir, plugin.ManifestFile), []byte(`{"apiVersion": "nuon.dev/v1", "kind": "Plugin", "name": "fails",
  "version": "1.0.0", "protocols": [1], "operations": ["apply"], "capabilities": {}, "executables": {"linux/amd64": "fails"}}`), 0o644); err != nil {
			t.Fatal(err)
		}
		fa, fi := reg.release(t, failDir, same, base, reg.vendor, reg.vendor)
		fails := imageJob("fails-g1-update-image", "fails", fa, fi, schemas.PluginCapabilities{})
		_, err := k.RunEnv(t.Context(), fails, pc.jobDir(fails.ID), nil)
		if !errors.Is(err, ErrJobFailed) || !strings.Contains(err.Error(), "exited 3") {
			t.Errorf("RunEnv = %v; want it failed, the plugin exited 3", err)
		}
		checkUnstaged(t, pc.jobDir(fails.ID))

		// An artifact the registry does not hold: the staging fails
		// before any object exists, and leaves nothing.
		missing := imageJob("dns-g1-update-i-missing", "zonefile", art, img, zone)
		missing.Artifacts = append(missing.Artifacts, schemas.Artifact{Name: "records", Local: reg.repo.Digest("sha256:" + strings.Repeat("0", 64)).String(),
			Digest: "sha256:" + strings.Repeat("0", 64), MediaType: "application/vnd.oci.image.manifest.v1+json"})
		_, err = k.RunEnv(t.Context(), missing, pc.jobDir(missing.ID), nil)
		if !errors.Is(err, ErrJobFailed) {
			t.Errorf("RunEnv = %v; want it failed", err)
		}
		if n := jobObjects(t, pc, missing.ID); n != 0 {
			t.Errorf("a job whose staging failed left %d objects", n)
		}
		checkUnstaged(t, pc.jobDir(missing.ID))
	})

	t.Run("a staged directory that escapes", func(t *testing.T) {
		outside := t.TempDir()
		if err := os.MkdirAll(filepath.Join(pc.work, "jobs"), 0o700); err != nil {
			t.Fatal(err)
		}
		linked := filepath.Join(pc.work, "jobs", "linked")
		if err := os.Symlink(outside, linked); err != nil {
			t.Fatal(err)
		}
		inVolume := filepath.Join(pc.work, "jobs", "other")
		if err := os.MkdirAll(inVolume, 0o700); err != nil {
			t.Fatal(err)
		}
		within := filepath.Join(pc.work, "jobs", "within")
		if err := os.Symlink(inVolume, within); err != nil {
			t.Fatal(err)
		}
		noVolume := *k
		noVolume.Volumes, noVolume.VolumeMounts = nil, nil
		for i, tt := range []struct {
			name, dir string
			k         *Kube
			want      string
		}{
			{"a link out of the volume", linked, k, "symbolic link"},
			{"a link within the volume", within, k, "symbolic link"},
			{"dot-dot out of the volume", pc.work + "/jobs/../../" + filepath.Base(outside), k, "--job-state-claim"},
			{"no staging volume", pc.jobDir("no-volume"), &noVolume, "--job-state-claim"},
		} {
			t.Run(tt.name, func(t *testing.T) {
				j := imageJob("dns-g1-update-i-escape-"+strconv.Itoa(i), "zonefile", art, img, zone)
				_, err := tt.k.RunEnv(t.Context(), j, tt.dir, nil)
				if !errors.Is(err, ErrJobFailed) || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("RunEnv = %v; want %v saying %q", err, ErrJobFailed, tt.want)
				}
				if n := jobObjects(t, pc, j.ID); n != 0 {
					t.Errorf("refused, the job left %d objects", n)
				}
				for _, d := range []string{outside, inVolume} {
					if _, err := os.Lstat(filepath.Join(d, "plugin-in")); !errors.Is(err, fs.ErrNotExist) {
						t.Errorf("something was staged in %s: %v", d, err)
					}
				}
			})
		}
	})

	t.Run("refused before any object exists", func(t *testing.T) {
		otherArt, otherImg := reg.release(t, zonefileDir, func(s string) string { return strings.Replace(s, "0.3.0", "0.3.2", 1) }, base, reg.another, reg.another)
		unsignedArt, unsignedImg := reg.release(t, zonefileDir, func(s string) string { return strings.Replace(s, "0.3.0", "0.3.3", 1) }, base, reg.vendor, nil)
		needsArt, needsImg := reg.release(t, zonefileDir, func(s string) string {
			s = strings.Replace(s, "0.3.0", "0.3.1", 1)
			return strings.Replace(s, `"capabilities": {`, `"capabilities": {"network": true, "secrets": true, "cloudRole": true, `, 1)
		}, base, reg.vendor, reg.vendor)
		for _, tt := range []struct {
			name string
			job  *schemas.Job
			is   error
			want string
		}{
			{"needs more than granted", imageJob("dns-g1-update-i-exceeds", "zonefile", needsArt, needsImg, zone), plugin.ErrNotGranted, "needs network, secrets and cloudRole"},
			{"signed by another key", imageJob("dns-g1-update-i-otherkey", "zonefile", otherArt, otherImg, zone), oci.ErrBadSignature, ""},
			{"unsigned image", imageJob("dns-g1-update-i-unsigned", "zonefile", unsignedArt, unsignedImg, zone), oci.ErrUnsigned, ""},
			{"image pinned by another digest", func() *schemas.Job {
				j := imageJob("dns-g1-update-i-digest", "zonefile", art, img, zone)
				j.Artifacts[1].Digest = needsImg.DigestStr()
				return j
			}(), plugin.ErrNotPinned, "is not pinned by its digest"},
			{"the image of another release", imageJob("dns-g1-update-i-release", "zonefile", art, needsImg, zone), plugin.ErrNotPinned, "is the release of artifact"},
		} {
			t.Run(tt.name, func(t *testing.T) {
				_, err := k.RunEnv(t.Context(), tt.job, pc.jobDir(tt.job.ID), cloud)
				if err == nil || !errors.Is(err, ErrJobFailed) || !errors.Is(err, tt.is) || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("RunEnv = %v; want %v and %v saying %q", err, ErrJobFailed, tt.is, tt.want)
				}
				if n := jobObjects(t, pc, tt.job.ID); n != 0 {
					t.Errorf("a refused plugin job left %d objects", n)
				}
			})
		}
	})
}

// jobObjects counts the objects of job id.
func jobObjects(t testing.TB, pc *pluginCluster, id string) int {
	ctx := context.Background()
	sel := metav1.ListOptions{LabelSelector: LabelJob + "=" + idHash(id)}
	jobs, _ := pc.cs.BatchV1().Jobs(pluginNamespace).List(ctx, sel)
	cms, _ := pc.cs.CoreV1().ConfigMaps(pluginNamespace).List(ctx, sel)
	nps, _ := pc.cs.NetworkingV1().NetworkPolicies(pluginNamespace).List(ctx, sel)
	secrets, _ := pc.cs.CoreV1().Secrets(pluginNamespace).List(ctx, sel)
	pods, _ := pc.cs.CoreV1().Pods(pluginNamespace).List(ctx, sel)
	return len(jobs.Items) + len(cms.Items) + len(nps.Items) + len(secrets.Items) + len(pods.Items)
}

// BenchmarkKubePluginImageJob is BenchmarkKubePluginJob in the image
// form: the zonefile plugin's image on a perl base, admitted (signature,
// manifest and config from the registry), its pod's three containers run
// by the test kubelet one after the other (the image pulled and unpacked
// into a root of its own for the plugin's), its result read.
func BenchmarkKubePluginImageJob(b *testing.B) {
	reg := newPluginRegistry(b)
	pc, k := imageCluster(b, reg)
	base, err := plugintest.HostImageList("../../fixtures/plugins/zonefile-base.txt")
	if err != nil {
		b.Fatal(err)
	}
	art, img := reg.release(b, zonefileDir, func(s string) string { return s }, base, reg.vendor, reg.vendor)
	ctx := context.Background()
	var toPod, inPod, toResult time.Duration
	var objects int
	b.ResetTimer()
	for i := range b.N {
		job := imageJob("dns-g1-update-ibench-"+strconv.Itoa(i), "zonefile", art, img, schemas.PluginCapabilities{Env: []string{"NUON_ZONE_DIR"}})
		start := time.Now()
		if _, err := k.RunEnv(ctx, job, pc.jobDir(job.ID), []string{"AWS_SECRET_ACCESS_KEY=withheld"}); err != nil {
			b.Fatalf("RunEnv: %v\n%s", err, pc.kl.log(KubeName(job.ID)))
		}
		end := time.Now()
		started, ended := pc.kl.startedAt(KubeName(job.ID))
		toPod += started.Sub(start)
		inPod += ended.Sub(started)
		toResult += end.Sub(ended)
		b.StopTimer()
		objects += jobObjects(b, pc, job.ID)
		b.StartTimer()
	}
	b.ReportMetric(float64(toPod.Milliseconds())/float64(b.N), "pod-start-ms")
	b.ReportMetric(float64(inPod.Milliseconds())/float64(b.N), "pod-run-ms")
	b.ReportMetric(float64(toResult.Milliseconds())/float64(b.N), "result-ms")
	b.ReportMetric(float64(objects)/float64(b.N), "objects/job")
}
