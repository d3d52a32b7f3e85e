package helm

import (
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// getter hands Helm a client configuration that is already loaded, with
// the release's namespace as the default one.
type getter struct {
	cfg       *rest.Config
	namespace string

	once   sync.Once
	disc   discovery.CachedDiscoveryInterface
	mapper meta.RESTMapper
	err    error
}

var _ genericclioptions.RESTClientGetter = (*getter)(nil)

func (g *getter) ToRESTConfig() (*rest.Config, error) { return rest.CopyConfig(g.cfg), nil }

func (g *getter) init() {
	g.once.Do(func() {
		dc, err := discovery.NewDiscoveryClientForConfig(rest.CopyConfig(g.cfg))
		if err != nil {
			g.err = err
			return
		}
		g.disc = memory.NewMemCacheClient(dc)
		g.mapper = restmapper.NewShortcutExpander(restmapper.NewDeferredDiscoveryRESTMapper(g.disc), g.disc, nil)
	})
}

func (g *getter) ToDiscoveryClient() (discovery.CachedDiscoveryInterface, error) {
	g.init()
	return g.disc, g.err
}

func (g *getter) ToRESTMapper() (meta.RESTMapper, error) {
	g.init()
	return g.mapper, g.err
}

// ToRawKubeConfigLoader only serves the default namespace: the connection
// itself comes from ToRESTConfig.
func (g *getter) ToRawKubeConfigLoader() clientcmd.ClientConfig {
	return clientcmd.NewDefaultClientConfig(*clientcmdapi.NewConfig(), &clientcmd.ConfigOverrides{
		Context: clientcmdapi.Context{Namespace: g.namespace},
	})
}
