#!/usr/bin/env bash
# Builds the Kubernetes components the k8s suite runs (kube-apiserver,
# kube-controller-manager, kube-scheduler, kubelet) from the k8s.io/kubernetes
# module, into a cache outside the repository keyed by version; a second run
# with the same recipe does nothing. About 8.5 minutes on 2 cores, cold.
#
# The module archive has no staging/ sources: its go.mod points every k8s.io/*
# staging module at ./staging/src/k8s.io/*, so this copies the module out of the
# module cache and points those replaces at the published k8s.io/* modules of
# the matching v0 version instead.
#
# Usage: build-k8s.sh            prints the bin directory on its last line
# Env:   K8S_VERSION (v1.36.3), NRI_HANDOVER_K8S_CACHE (~/.cache/nri-handover/k8s), GO (go)
set -euo pipefail
GO=${GO:-go}
VERSION=${K8S_VERSION:-v1.36.3}
STAGING=v0.${VERSION#v1.}
CACHE=${NRI_HANDOVER_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nri-handover/k8s}
BASE=$CACHE/$VERSION
BIN=$BASE/bin
CMDS="kube-apiserver kube-controller-manager kube-scheduler kubelet"

major=${VERSION#v}; major=${major%%.*}
minor=${VERSION#v*.}; minor=${minor%%.*}
pkgs="k8s.io/component-base/version k8s.io/client-go/pkg/version"
ldflags="-s -w"
for p in $pkgs; do
	ldflags="$ldflags -X $p.gitVersion=$VERSION -X $p.gitMajor=$major -X $p.gitMinor=$minor"
	ldflags="$ldflags -X $p.gitCommit=module-proxy -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
done
recipe="k8s.io/kubernetes@$VERSION staging=$STAGING CGO_ENABLED=0 $("$GO" env GOVERSION) ldflags=$ldflags cmds=$CMDS"

have=1
[ "$(cat "$BASE/recipe" 2>/dev/null)" = "$recipe" ] || have=0
for c in $CMDS; do [ -x "$BIN/$c" ] || have=0; done
if [ $have = 1 ]; then
	echo "build-k8s: Kubernetes $VERSION cached in $BIN" >&2
	echo "$BIN"
	exit 0
fi

mkdir -p "$BASE"
exec 9>"$BASE/lock"
flock 9
# Another build may have finished while this one waited for the lock.
have=1
[ "$(cat "$BASE/recipe" 2>/dev/null)" = "$recipe" ] || have=0
for c in $CMDS; do [ -x "$BIN/$c" ] || have=0; done
if [ $have = 1 ]; then echo "$BIN"; exit 0; fi

start=$(date +%s)
echo "build-k8s: building Kubernetes $VERSION ($CMDS) from the module proxy; about 8.5 minutes on 2 cores" >&2
dir=$("$GO" mod download -json "k8s.io/kubernetes@$VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -n "$dir" ] && [ -f "$dir/go.mod" ] || { echo "build-k8s: cannot download k8s.io/kubernetes@$VERSION" >&2; exit 1; }
src=$BASE/src.tmp-$$
tmpbin=$BASE/bin.tmp-$$
trap 'chmod -R u+w "$src" 2>/dev/null; rm -rf "$src" "$tmpbin"' EXIT
rm -rf "$src" "$tmpbin"
cp -r "$dir" "$src"
chmod -R u+w "$src"
rm -f "$src/go.work" "$src/go.work.sum"
cd "$src"
edits=()
for m in $(sed -n 's#^[[:space:]]*\(k8s.io/[^ ]*\) => ./staging/src/k8s.io/.*#\1#p' go.mod); do
	edits+=("-replace=$m=$m@$STAGING")
done
[ ${#edits[@]} -gt 0 ] || { echo "build-k8s: no staging replaces found in go.mod" >&2; exit 1; }
"$GO" mod edit "${edits[@]}"
mkdir -p "$tmpbin"
GOFLAGS=-mod=mod CGO_ENABLED=0 GOWORK=off "$GO" build -trimpath -ldflags "$ldflags" -o "$tmpbin/" \
	$(for c in $CMDS; do echo ./cmd/$c; done)
"$tmpbin/kubelet" --version >&2
rm -rf "$BIN"
mv "$tmpbin" "$BIN"
printf '%s' "$recipe" >"$BASE/recipe"
echo "build-k8s: built in $(( $(date +%s) - start )) s into $BIN" >&2
echo "$BIN"
