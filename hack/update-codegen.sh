#!/usr/bin/env bash
# Regenerates deepcopy, conversion and defaulting code for the API packages
# with k8s.io/code-generator at the version go.mod pins.
set -euo pipefail
cd "$(dirname "$0")/.."

header=hack/boilerplate.go.txt
gen() { go run "k8s.io/code-generator/cmd/$1" "${@:2}"; }

gen deepcopy-gen --go-header-file "$header" --output-file zz_generated.deepcopy.go \
  ./apis/config ./apis/config/v1 ./apis/resourcepool/v1alpha1
gen defaulter-gen --go-header-file "$header" --output-file zz_generated.defaults.go \
  ./apis/config/v1
gen conversion-gen --go-header-file "$header" --output-file zz_generated.conversion.go \
  --extra-peer-dirs k8s.io/apimachinery/pkg/apis/meta/v1 \
  ./apis/config/v1
