package jobs

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	sigstoresig "github.com/sigstore/sigstore/pkg/signature"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
my $root = open(my $a, '>', '/spy-was-here') ? 1 : 0;
my $in = open(my $b, '>', '/nuon/plugin/in/spy-was-here') ? 1 : 0;
print encode_json({apiVersion => 'nuon.dev/v1', kind => 'PluginResponse', protocol => 1,
	operation => $req->{operation}, changed => JSON::PP::false,
	outputs => {files => \@files, env => [sort keys %ENV], uid => $< + 0, rootWritable => $root, inWritable => $in}});
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
// zone directory its own /tmp, the registry's pull credential in a Secret
// only the prepare container mounts.
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
	if _, err := pc.cs.CoreV1().Secrets(pluginNamespace).Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "registry-pull"},
		Data: map[string][]byte{"password": []byte("registry-pull-password-0001"), "ca.crt": []byte("-----BEGIN CERTIFICATE-----")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	k := *pc.k
	k.Env = []corev1.EnvVar{{Name: "NUON_ZONE_DIR", Value: "/tmp"}, {Name: "NOT_GRANTED", Value: "not-granted-value"}}
	k.AdmitPluginImage = reg.imageAdmission()
	k.RegistryVolumes = []corev1.Volume{{Name: "registry", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "registry-pull"}}}}
	k.RegistryMounts = []corev1.VolumeMount{{Name: "registry", MountPath: "/nuon/registry", ReadOnly: true}}
	k.RegistryEnv = []corev1.EnvVar{{Name: "NUON_REGISTRY_CA_FILE", Value: "/nuon/registry/ca.crt"}}
	return pc, &k
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
	res, err := k.RunEnv(t.Context(), job, t.TempDir(), cloud)
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

	t.Run("the pod", func(t *testing.T) {
		if len(pod.Spec.InitContainers) != 2 || pod.Spec.InitContainers[0].Image != k.Image || pod.Spec.InitContainers[1].Image != img.String() {
			t.Fatalf("init containers %+v", pod.Spec.InitContainers)
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
			if m.Name == "registry" || m.Name == "manifest" || m.Name == "nuon-state" {
				t.Errorf("the plugin's container mounts %s", m.Name)
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
		if !slices.ContainsFunc(pod.Spec.InitContainers[0].VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "registry" }) {
			t.Error("the prepare container has no registry credential")
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
  "version": "1.0.0", "protocols": [1], "operations": ["apply"], "capabilities": {}, "executables": {"linux/amd64": "spy"}}`), 0o644); err != nil {
			t.Fatal(err)
		}
		sa, si := reg.release(t, spyDir, same, base, reg.vendor, reg.vendor)
		spy := imageJob("spy-g1-update-image", "spy", sa, si, schemas.PluginCapabilities{Network: true, Secrets: true, CloudRole: true})
		res, err := k.RunEnv(t.Context(), spy, t.TempDir(), cloud)
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
				_, err := k.RunEnv(t.Context(), tt.job, t.TempDir(), cloud)
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
		if _, err := k.RunEnv(ctx, job, b.TempDir(), []string{"AWS_SECRET_ACCESS_KEY=withheld"}); err != nil {
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
