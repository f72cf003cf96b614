package kube

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
)

// The few calls the pools make, over REST clients whose scheme knows only
// core/v1 and policy/v1. client-go's typed clients register every API
// group's types (k8s.io/client-go/kubernetes/scheme), which would double
// the add-on's binary for two groups' worth of calls.

// scheme is the types the clients decode.
func newScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := corev1.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := policyv1.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}

// restFor is a REST client for one group version.
func restFor(cfg *rest.Config, s *runtime.Scheme, gv schema.GroupVersion, apiPath string) (rest.Interface, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.GroupVersion = &gv
	cfg.APIPath = apiPath
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(s).WithoutConversion()
	if cfg.ContentType == "" {
		cfg.ContentType = runtime.ContentTypeJSON
	}
	rc, err := rest.RESTClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("client for %s: %w", gv, err)
	}
	return rc, nil
}

// into sends r and decodes the answer into out.
func into[T runtime.Object](ctx context.Context, r *rest.Request, out T) (T, error) {
	return out, r.Do(ctx).Into(out)
}

// coreAPI is the core/v1 calls.
type coreAPI struct {
	rc rest.Interface
	pc runtime.ParameterCodec
}

func (a coreAPI) Pods(namespace string) podsAPI { return podsAPI{a, namespace} }
func (a coreAPI) Nodes() nodesAPI               { return nodesAPI{a} }

type podsAPI struct {
	coreAPI
	ns string
}

func (a podsAPI) List(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error) {
	return into(ctx, a.rc.Get().Namespace(a.ns).Resource("pods").VersionedParams(&opts, a.pc), &corev1.PodList{})
}

func (a podsAPI) Get(ctx context.Context, name string, _ metav1.GetOptions) (*corev1.Pod, error) {
	return into(ctx, a.rc.Get().Namespace(a.ns).Resource("pods").Name(name), &corev1.Pod{})
}

type nodesAPI struct{ coreAPI }

func (a nodesAPI) List(ctx context.Context, opts metav1.ListOptions) (*corev1.NodeList, error) {
	return into(ctx, a.rc.Get().Resource("nodes").VersionedParams(&opts, a.pc), &corev1.NodeList{})
}

func (a nodesAPI) Get(ctx context.Context, name string, _ metav1.GetOptions) (*corev1.Node, error) {
	return into(ctx, a.rc.Get().Resource("nodes").Name(name), &corev1.Node{})
}

func (a nodesAPI) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, _ metav1.PatchOptions) (*corev1.Node, error) {
	return into(ctx, a.rc.Patch(pt).Resource("nodes").Name(name).Body(data), &corev1.Node{})
}

// policyAPI is the policy/v1 calls.
type policyAPI struct {
	rc rest.Interface
	pc runtime.ParameterCodec
}

func (a policyAPI) RESTClient() rest.Interface { return a.rc }

func (a policyAPI) PodDisruptionBudgets(namespace string) pdbsAPI { return pdbsAPI{a, namespace} }

type pdbsAPI struct {
	policyAPI
	ns string
}

func (a pdbsAPI) List(ctx context.Context, opts metav1.ListOptions) (*policyv1.PodDisruptionBudgetList, error) {
	return into(ctx, a.rc.Get().Namespace(a.ns).Resource("poddisruptionbudgets").VersionedParams(&opts, a.pc), &policyv1.PodDisruptionBudgetList{})
}
