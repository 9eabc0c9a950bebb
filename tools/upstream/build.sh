#!/usr/bin/env bash
# Builds the real Kubernetes and Argo CD parts the tests and benchmarks run beside tiphys, from the
# Go module proxy, at the versions pinned by the wrapper modules next to this script:
#   kube/go.mod    k8s.io/kubernetes (kube-apiserver, kube-controller-manager); the module replaces
#                  its k8s.io/* staging modules with local paths, so the wrapper replaces each one
#                  with its published twin of the same release
#   argocd/go.mod  github.com/argoproj/argo-cd/v3 (one binary: argocd, argocd-server,
#                  argocd-application-controller, argocd-repo-server, ... by the name it is called
#                  with); the wrapper repeats the replace block of Argo CD's own go.mod
#   godiff/        our own small program (main.go) over the Go libraries tiphys reimplements
#                  (gobwas/glob, time, k8s.io/apimachinery labels, regexp, encoding/csv), at the
#                  versions Argo CD pins, for the differential tests (tests/godiff)
#
# The binaries go to $TIPHYS_UPSTREAM_CACHE (default ~/.cache/tiphys-upstream), in a folder keyed
# by the wrapper's go.mod and go.sum, so a warm run builds nothing. Go's module and build caches
# are Go's own (GOMODCACHE, GOCACHE). Nothing here is written into the checkout.
#
# Usage: bash tools/upstream/build.sh            build what is missing; print the bin folder
#        bash tools/upstream/build.sh --print    print the bin folder, build nothing (exit 1 if
#                                                a part is missing)
#        either, followed by binary names (e.g. godiff): only those parts (a test that needs
#        one small part need not wait for Kubernetes to build)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${TIPHYS_UPSTREAM_CACHE:-$HOME/.cache/tiphys-upstream}

say() { printf '==> %s\n' "$*" >&2; }
die() { printf 'tools/upstream/build.sh: %s\n' "$*" >&2; exit 1; }

if ! command -v go >/dev/null 2>&1; then
  die "Go is not installed: the Kubernetes and Argo CD parts of the tests are built from Go modules.
Install Go 1.25 or newer (https://go.dev/doc/install; Debian 12's golang-go is too old) and put
\`go\` on PATH, then run this again."
fi
go_version=$(go env GOVERSION)
case "$go_version" in
  go1.2[5-9]*|go1.[3-9]*) ;;
  *) die "Go $go_version is too old: Argo CD's module needs Go 1.25 or newer." ;;
esac

# The version strings the binaries report (clients read them: kubectl and Argo CD's cluster
# checks parse the API server's, the argocd CLI prints the server's and its own). They are the
# pinned versions, stamped as each project's release build stamps them.
pinned() { awk -v m="$2" '$1 == m && $2 ~ /^v/ { print $2; exit }' "$here/$1/go.mod"; }
kube_version=$(pinned kube k8s.io/kubernetes)
argocd_version=$(pinned argocd github.com/argoproj/argo-cd/v3); argocd_version=${argocd_version#v}
[ -n "$kube_version" ] && [ -n "$argocd_version" ] || die "cannot read the pinned versions from kube/go.mod and argocd/go.mod"
kube_minor=$(echo "$kube_version" | cut -d. -f2)
ldflags_kube="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags_kube+=" -X $p.gitVersion=$kube_version -X $p.gitMajor=1 -X $p.gitMinor=$kube_minor -X $p.gitTreeState=clean"
  ldflags_kube+=" -X $p.buildDate=1970-01-01T00:00:00Z"
done
ldflags_argocd="-s -w -X github.com/argoproj/argo-cd/v3/common.version=$argocd_version"
ldflags_argocd+=" -X github.com/argoproj/argo-cd/v3/common.gitTreeState=clean"

# The key of a wrapper module: its requirements, its own sources if it has any (godiff's main.go)
# and how they are stamped, hashed (a new pin or a changed source is a new folder).
key() {
  { cat "$here/$1/go.mod" "$here/$1/go.sum"; find "$here/$1" -maxdepth 1 -name '*.go' | sort | xargs -r cat
    ldflags_of "$1"; } | sha256sum | cut -c1-16
}
ldflags_of() { case $1 in kube) echo "$ldflags_kube" ;; argocd) echo "$ldflags_argocd" ;; godiff) echo "-s -w" ;; esac; }
# "wrapper:package:binary" for each part.
parts=(
  "kube:k8s.io/kubernetes/cmd/kube-apiserver:kube-apiserver"
  "kube:k8s.io/kubernetes/cmd/kube-controller-manager:kube-controller-manager"
  "argocd:github.com/argoproj/argo-cd/v3/cmd:argocd"
  "godiff:tiphys.test/upstream/godiff:godiff"
)
bin_of() { local wrapper=${1%%:*} name=${1##*:}; echo "$cache/$wrapper-$(key "$wrapper")/$name"; }

print=false
if [ "${1:-}" = "--print" ]; then print=true; shift; fi
if [ $# -gt 0 ]; then
  wanted=()
  for name in "$@"; do
    found=""
    for part in "${parts[@]}"; do [ "${part##*:}" = "$name" ] && found=$part; done
    [ -n "$found" ] || die "no part is called $name (the parts: ${parts[*]##*:})"
    wanted+=("$found")
  done
  parts=("${wanted[@]}")
fi

if $print; then
  for part in "${parts[@]}"; do
    [ -x "$(bin_of "$part")" ] || die "${part##*:} is not built: run bash tools/upstream/build.sh"
    dirname "$(bin_of "$part")"
  done | sort -u
  exit 0
fi

for part in "${parts[@]}"; do
  wrapper=${part%%:*}; rest=${part#*:}; pkg=${rest%%:*}; name=${part##*:}
  out=$(bin_of "$part")
  if [ -x "$out" ]; then
    say "$name: cached ($out)"
    continue
  fi
  mkdir -p "$(dirname "$out")"
  log="$(dirname "$out")/$name.build.log"
  say "$name: building $pkg (log: $log)"
  start=$(date +%s)
  # -mod=readonly: the committed go.sum is the whole truth; a missing sum is an error, not a fetch
  # of something unpinned. CGO off: static binaries, no C toolchain needed.
  if ! (cd "$here/$wrapper" && CGO_ENABLED=0 GOFLAGS=-mod=readonly \
        go build -trimpath -ldflags="$(ldflags_of "$wrapper")" -o "$out.partial.$$" "$pkg") >"$log.$$" 2>&1; then
    mv "$log.$$" "$log"
    tail -n 30 "$log" >&2
    die "building $name ($pkg, pinned in tools/upstream/$wrapper/go.mod) failed: see $log"
  fi
  # Per-process names, then one rename: two runs at once (tests building godiff side by side)
  # never see each other's half-written binary.
  mv "$log.$$" "$log"
  mv "$out.partial.$$" "$out"
  say "$name: built in $(( $(date +%s) - start )) s"
done
for part in "${parts[@]}"; do dirname "$(bin_of "$part")"; done | sort -u
