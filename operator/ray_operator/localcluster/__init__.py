"""The embedded local control plane: etcd, kube-apiserver, kube-scheduler and KWOK on loopback.

It serves `make run` (an operator with nothing to install) and the test suite (one real API
server for the whole run), following controller-runtime's envtest pattern.
"""
