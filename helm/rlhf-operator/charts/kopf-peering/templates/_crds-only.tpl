{{/*
This chart ships CRDs only (crds/). The peering objects themselves are rendered by the parent
chart (templates/peering.yaml), which knows the release's namespaces and peering name.
*/}}
