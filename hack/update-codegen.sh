#!/usr/bin/env bash
# Regenerates deepcopy, conversion and defaulting code for the API packages,
# and the typed clientset, listers and informers of the drascope.dev API
# (pkg/generated), with k8s.io/code-generator at the version go.mod pins.
set -euo pipefail
cd "$(dirname "$0")/.."

header=hack/boilerplate.go.txt
gen() { go run "k8s.io/code-generator/cmd/$1" "${@:2}"; }

gen deepcopy-gen --go-header-file "$header" --output-file zz_generated.deepcopy.go \
  ./apis/config ./apis/config/v1 ./apis/drascope/v1alpha1
gen defaulter-gen --go-header-file "$header" --output-file zz_generated.defaults.go \
  ./apis/config/v1
gen conversion-gen --go-header-file "$header" --output-file zz_generated.conversion.go \
  --extra-peer-dirs k8s.io/apimachinery/pkg/apis/meta/v1 \
  ./apis/config/v1

# The drascope.dev API's client: what every reader and writer of
# ResourcePools and DeviceQuotas uses (the publisher, the quota's
# enforcement, kubectl dra, the sandbox, tests). Generated files are
# removed first, so a type that goes away takes its client with it.
module=github.com/drascope/drascope
rm -rf pkg/generated
gen client-gen --go-header-file "$header" \
  --output-dir pkg/generated/clientset --output-pkg "$module/pkg/generated/clientset" \
  --clientset-name versioned --input-base "$module/apis" --input drascope/v1alpha1
gen lister-gen --go-header-file "$header" \
  --output-dir pkg/generated/listers --output-pkg "$module/pkg/generated/listers" \
  ./apis/drascope/v1alpha1
gen informer-gen --go-header-file "$header" \
  --output-dir pkg/generated/informers --output-pkg "$module/pkg/generated/informers" \
  --versioned-clientset-package "$module/pkg/generated/clientset/versioned" \
  --listers-package "$module/pkg/generated/listers" \
  ./apis/drascope/v1alpha1
