#!/bin/sh
# Kubernetes objects are read and written in operator/ through the types generated from the API
# server's own schemas (operator/kube/kube_types.json), never by string keys: a misspelt key compiles
# and silently reads a default. This keeps it so. The files below index JSON on purpose, each for a
# reason that is not a Kubernetes object, and so may a line marked `// json: WHY` (the trainer's
# config file, our spec as written, a JSON Schema):
#   api/cel_rules.cpp      the C++ twins of the CRD's CEL rules see the object as CEL does: raw,
#                          before defaults and types (a rule must judge what the user wrote)
#   api/crd.cpp            writes the CRD, whose body is a JSON Schema (schemas of schemas)
#   kube/client_config.cpp reads a kubeconfig file (YAML, yaml-cpp's nodes), not an API object
#   api/job.cpp            judges a FineTuneJob manifest as written (apiVersion, kind, a metadata
#                          that may not even be a mapping) before it is known to fit any type, and
#                          is the one place that takes our own CRD's spec and status members out of
#                          the object and puts the status back (both are then generated types)
#
# usage: string_keys_test.sh SOURCE_DIR
set -eu
cd "$1/operator"
# obj["key"], obj.value("key", ...), obj.at/contains/find/erase("key"), any key without a space.
pattern='\["[^" ]+"\]|\.(value|at|contains|find|erase)\("[^" ]+"'
found=$(grep -rnE "$pattern" --include='*.cpp' --include='*.h' . | grep -v '// json: ' |
  grep -vE '^\./(api/cel_rules\.cpp|api/crd\.cpp|api/job\.cpp|kube/client_config\.cpp):' || true)
if [ -n "$found" ]; then
  echo "string keys on Kubernetes objects in operator/ (use the types of operator/kube/kube_types.h):"
  echo "$found"
  exit 1
fi
echo "no string keys in operator/ outside cel_rules.cpp, crd.cpp, job.cpp, client_config.cpp"
