module github.com/ray-operator/tests/bounded_yaml/oracle

go 1.22

require sigs.k8s.io/yaml v1.6.0

require go.yaml.in/yaml/v2 v2.4.2 // indirect
