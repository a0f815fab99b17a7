#!/usr/bin/env bash
# Pins k8s.io/kubernetes at VERSION and regenerates the replace block for every
# staging module that upstream's go.mod replaces with ./staging/src/..., pointing
# each at the matching v0.X.Y tag on the module proxy.
#
#   hack/update-k8s.sh 1.37.2
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 VERSION   (for example 1.37.2)" >&2
  exit 2
fi
version=${1#v}
if [[ ! $version =~ ^1\.([0-9]+)\.([0-9]+)$ ]]; then
  echo "$0: VERSION must look like 1.37.2, got '$1'" >&2
  exit 2
fi
staging_version="v0.${BASH_REMATCH[1]}.${BASH_REMATCH[2]}"

cd "$(dirname "$0")/.."

# Upstream's go.mod, as the module proxy serves it.
upstream_mod=$(go mod download -json "k8s.io/kubernetes@v${version}" | sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p')
if [[ -z $upstream_mod || ! -f $upstream_mod ]]; then
  echo "$0: the module proxy did not serve k8s.io/kubernetes@v${version}" >&2
  exit 1
fi

mapfile -t staging < <(awk '$2 == "=>" && $3 ~ /^\.\/staging\/src\// {print $1}' "$upstream_mod" | sort -u)
if [[ ${#staging[@]} -eq 0 ]]; then
  echo "$0: found no staging replace lines in $upstream_mod" >&2
  exit 1
fi

# Drop the old replace lines for k8s.io modules, then write the new ones.
for m in $(go mod edit -json | awk -F'"' '/"Old": \{/{getline; print $4}' | grep '^k8s\.io/' || true); do
  go mod edit -dropreplace="$m"
done
go mod edit -require="k8s.io/kubernetes@v${version}"
for m in "${staging[@]}"; do
  go mod edit -replace="${m}=${m}@${staging_version}"
done
go mod tidy
echo "k8s.io/kubernetes v${version}: ${#staging[@]} staging modules replaced at ${staging_version}"
