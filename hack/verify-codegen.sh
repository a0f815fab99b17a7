#!/usr/bin/env bash
# Fails when the generated code in the tree is not what hack/update-codegen.sh
# makes from the API types: deepcopy, conversion and defaulting code under
# apis/, and the ResourcePool clientset, listers and informers in
# pkg/generated. A stale tree is left regenerated, for you to commit.
set -euo pipefail
cd "$(dirname "$0")/.."

before=$(mktemp -d)
trap 'rm -rf "$before"' EXIT
mkdir -p "$before/generated"
cp -r apis "$before/apis"
if [ -d pkg/generated ]; then cp -r pkg/generated/. "$before/generated/"; fi

hack/update-codegen.sh

if ! diff -ru "$before/apis" apis || ! diff -ru "$before/generated" pkg/generated; then
  echo >&2 "Generated code was stale; hack/update-codegen.sh has regenerated it (above). Commit the result."
  exit 1
fi
