package scenario

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/drainscope/drainscope/store"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// ServerImage is the image name the lab node runs drainscope itself for
// (Options.Images): DeployServer's pod.
const ServerImage = "drainscope.dev/drainscope:lab"

// ServerName names the server's Service, Secret and pod in Namespace, as
// the Helm chart names them for a release called drainscope.
const ServerName = "drainscope-server"

// DeployServer runs `drainscope serve` over the lab's store dsn in the lab
// as the Helm chart runs it: a pod with the chart's labels listening on its
// port named http, its token (DRAINSCOPE_AUTH_TOKEN) and store
// (DRAINSCOPE_STORE) from Secrets, behind a Service with the chart's
// labels. kubectl drainscope finds it there. It returns the token once the
// pod is ready. An SQLite store is opened read-only (the lab writes it) and
// on a real node reached as serverStore says.
func DeployServer(ctx context.Context, c *Cluster, dsn string) (string, error) {
	ss, err := serverStore(dsn, c.Node.Kind() == NodeKubelet)
	if err != nil {
		return "", err
	}
	dsn = ss.DSN
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	token := hex.EncodeToString(b[:])
	selector := map[string]string{"app.kubernetes.io/name": "drainscope", "app.kubernetes.io/instance": "drainscope"}
	labels := map[string]string{"app.kubernetes.io/part-of": "drainscope", "app.kubernetes.io/component": "server"}
	podLabels := map[string]string{"app.kubernetes.io/component": "server"}
	for k, v := range selector {
		labels[k], podLabels[k] = v, v
	}
	core := c.Client.CoreV1()
	fromSecret := func(name, key string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}}
	}
	if _, err := core.Secrets(Namespace).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: ServerName, Labels: labels},
		Data:       map[string][]byte{"auth-token": []byte(token), "dsn": []byte(dsn)},
	}, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("creating the server's Secret: %w", err)
	}
	if _, err := core.Services(Namespace).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: ServerName, Labels: labels},
		Spec: corev1.ServiceSpec{Selector: selector,
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}}},
	}, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("creating the server's Service: %w", err)
	}
	pod := ServerName + "-0"
	spec := corev1.PodSpec{Containers: []corev1.Container{{
		Name: "server", Image: ServerImage,
		// The lab records into the store; the server only reads it.
		Args: []string{"serve", "--listen=0.0.0.0:8080", "--retention=0"},
		Env: []corev1.EnvVar{
			{Name: "DRAINSCOPE_AUTH_TOKEN", ValueFrom: fromSecret(ServerName, "auth-token")},
			{Name: "DRAINSCOPE_STORE", ValueFrom: fromSecret(ServerName, "dsn")},
		},
		Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
		ReadinessProbe: &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{
			HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http")}}},
	}}}
	if ss.Dir != "" {
		dirType := corev1.HostPathDirectory
		spec.Volumes = []corev1.Volume{{Name: "store", VolumeSource: corev1.VolumeSource{
			HostPath: &corev1.HostPathVolumeSource{Path: ss.Dir, Type: &dirType}}}}
		ct := &spec.Containers[0]
		ct.VolumeMounts = []corev1.VolumeMount{{Name: "store", MountPath: ss.Dir}}
		ct.SecurityContext = &corev1.SecurityContext{RunAsUser: &ss.UID, RunAsGroup: &ss.GID}
	}
	if _, err := core.Pods(Namespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: pod, Labels: podLabels},
		Spec:       spec,
	}, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("creating the server's pod: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		p, err := core.Pods(Namespace).Get(wctx, pod, metav1.GetOptions{})
		if err == nil {
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
					return token, nil
				}
			}
		}
		select {
		case <-wctx.Done():
			msg := fmt.Sprint(err)
			if p != nil {
				for _, cs := range p.Status.ContainerStatuses {
					if w := cs.State.Waiting; w != nil {
						msg = w.Reason + ": " + w.Message
					}
				}
			}
			return "", fmt.Errorf("the server's pod %s/%s is not ready after 2 minutes: %s", Namespace, pod, msg)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// podStore is where the server's pod finds the lab's store.
type podStore struct {
	DSN string
	// Dir, on a real node, is the SQLite file's directory, mounted from
	// the host at the same path, and UID and GID the file's owner, whom
	// the container runs as.
	Dir      string
	UID, GID int64
}

// serverStore is how the server's pod opens the lab's store dsn. Postgres
// is passed on as it is. SQLite is opened by absolute path with mode=ro:
// the lab writes it. The process node's pods are host processes and see
// the file; a real node's containers do not, so there the file's directory
// is mounted read-write from the host and the container runs as the file's
// owner: a reader of a WAL database still writes the -shm index beside it
// (mode=ro only keeps it from writing the database), so neither a
// read-only mount nor the image's unprivileged user can open it.
func serverStore(dsn string, realNode bool) (podStore, error) {
	backend, target, err := store.Backend(dsn)
	if err != nil || backend != store.BackendSQLite {
		return podStore{DSN: dsn}, err
	}
	path, params, _ := strings.Cut(strings.TrimPrefix(target, "file:"), "?")
	if path, err = filepath.Abs(path); err != nil {
		return podStore{}, fmt.Errorf("the lab's store %s: %w", dsn, err)
	}
	switch {
	case params == "":
		params = "mode=ro"
	case !strings.Contains(params, "mode=ro"):
		params += "&mode=ro"
	}
	ps := podStore{DSN: "sqlite:" + path + "?" + params}
	if !realNode {
		return ps, nil
	}
	if path, err = filepath.EvalSymlinks(path); err != nil {
		return podStore{}, fmt.Errorf("the lab's store %s: %w", dsn, err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return podStore{}, fmt.Errorf("the lab's store %s: %w", dsn, err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return podStore{}, fmt.Errorf("the lab's store %s: no owner in its file status", dsn)
	}
	ps.DSN = "sqlite:" + path + "?" + params
	ps.Dir, ps.UID, ps.GID = filepath.Dir(path), int64(st.Uid), int64(st.Gid)
	return ps, nil
}
