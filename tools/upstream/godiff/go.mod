module tiphys.test/upstream/godiff

go 1.25.5

require (
	github.com/argoproj/pkg/v2 v2.0.1
	github.com/expr-lang/expr v1.17.7
	github.com/gobwas/glob v0.2.3
	k8s.io/apimachinery v0.34.0
)

require (
	github.com/go-logr/logr v1.4.3 // indirect
	k8s.io/klog/v2 v2.130.1 // indirect
	k8s.io/utils v0.0.0-20250604170112-4c0f3b243397 // indirect
)
