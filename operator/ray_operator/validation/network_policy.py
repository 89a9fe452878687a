"""Rules for a RayCluster's `spec.networkPolicy` (with the RayClusterNetworkPolicy gate on; off,
the field itself is refused by `validation/raycluster.py`).

KubeRay's (`utils/validation.go: validateNetworkPolicy`), each with its field path where KubeRay
stops at the first:
- ingress rules only where the mode restricts ingress, egress rules only where it restricts egress
  (in `head`, `worker` and each `workerGroups` entry);
- every `workerGroups` entry names a worker group of the cluster (and, ours, only once);
- every worker group's name is a DNS-1123 label: it becomes part of a NetworkPolicy's name.

Beyond KubeRay, what the API server would refuse when the operator creates the policies (so the
user hears it from `kubectl apply`, not from a Warning Event later), with Kubernetes' wording:
ports (1-65535 or an IANA service name; `endPort` only after a numeric `port`, not below it;
protocol TCP, UDP or SCTP), peers (one of podSelector/namespaceSelector or ipBlock alone),
label selectors (qualified keys, label values, operators and their values), ipBlocks (a CIDR,
`except` CIDRs strictly inside it); and the head's `dashboard-port` a port when a RayJob's
submitter is let in through it.

Bounded: `worker`'s rules are copied into every worker group's policy, so the whole field may
hold at most `MAX_NETWORK_POLICY_ITEMS` rules, peers, ports, CIDRs, selector terms and values
together, and the policies built from it `MAX_BUILT_ITEMS` (counting each policy); past either
bound it is refused in one error, without looking further. At most `MAX_ERRORS` errors are
reported. Pure: reads only.
"""

from __future__ import annotations

import ipaddress
import itertools
import re
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final

from ray_operator import features
from ray_operator.builders.network_policies import (
    DASHBOARD_PORT_PARAM,
    MODES,
    mode_of,
    restricts_egress,
    restricts_ingress,
)
from ray_operator.spec.raycluster import head_group, spec
from ray_operator.validation.errors import (
    FieldError,
    duplicate,
    forbidden,
    invalid,
    not_supported,
    required,
    shown,
)
from ray_operator.validation.limits import ClusterLimits
from ray_operator.validation.pod_template import dns1123_label_errors, port_name_errors

if TYPE_CHECKING:
    from ray_io.v1_views import RayCluster

PATH: Final = "spec.networkPolicy"
MAX_NETWORK_POLICY_ITEMS: Final = 1000
"""Rules + peers + ports + CIDRs + selector labels, expressions and values in the whole field.
KubeRay's deny-all sample uses 8; a policy's rules are copied per worker group, and each policy
must fit the API server's object size limit."""
MAX_BUILT_ITEMS: Final = 10_000
"""The same, in all the NetworkPolicies built from the field: `worker`'s rules are copied into
every group's policy, so 1,000 items and 1,000 groups would make a million (rebuilt at every
reconcile of the cluster)."""
MAX_ERRORS: Final = 50

_PROTOCOLS: Final = ["SCTP", "TCP", "UDP"]
_OPERATORS: Final = ["DoesNotExist", "Exists", "In", "NotIn"]
_LABEL_NAME_RE = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS1123_SUBDOMAIN_RE = re.compile(
    r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
)
_QUALIFIED_NAME_RULE = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
    "with an alphanumeric character (at most 63), with an optional DNS subdomain prefix and '/'"
)
_LABEL_VALUE_RULE = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (at most 63)"
)
_PORT_RULE = "must be between 1 and 65535, inclusive"


def network_policy_errors(cluster: RayCluster, *, limits: ClusterLimits) -> Iterator[FieldError]:
    """Every problem in `spec.networkPolicy` (none while its gate is off: the field is refused)."""
    config = spec(cluster).get("networkPolicy")
    if not isinstance(config, dict) or not limits.feature_gates.enabled(
        features.RAY_CLUSTER_NETWORK_POLICY
    ):
        return
    items = _count_items(config)
    if items > MAX_NETWORK_POLICY_ITEMS:
        yield invalid(
            PATH,
            f"{items} items",
            f"must have at most {MAX_NETWORK_POLICY_ITEMS} rules, peers, ports, CIDRs and "
            "selector terms in all (they are copied into every worker group's NetworkPolicy)",
        )
        return
    built = _built_items(cluster, config)
    if built > MAX_BUILT_ITEMS:
        yield invalid(
            PATH,
            f"{built} items",
            f"the NetworkPolicies built from it (one per worker group, each with the rules that "
            f"apply to it) must hold at most {MAX_BUILT_ITEMS} policies, rules, peers, ports, "
            "CIDRs and selector terms in all",
        )
        return
    yield from itertools.islice(_config_errors(cluster, config), MAX_ERRORS)


def _config_errors(cluster: RayCluster, config: Mapping[str, Any]) -> Iterator[FieldError]:
    mode = mode_of(config)
    if mode not in MODES:
        yield not_supported(f"{PATH}.mode", shown(mode), list(MODES))
        return
    for part in ("head", "worker"):
        yield from _rules_errors(f"{PATH}.{part}", _dict(config.get(part)), mode)
    yield from _worker_group_entry_errors(cluster, config, mode)
    yield from _group_name_errors(cluster)
    if restricts_ingress(mode):
        yield from _dashboard_port_errors(cluster)


def _worker_group_entry_errors(
    cluster: RayCluster, config: Mapping[str, Any], mode: str
) -> Iterator[FieldError]:
    groups = {group.get("groupName") for group in spec(cluster).get("workerGroupSpecs") or ()}
    seen: set[str] = set()
    for index, entry in enumerate(_list(config.get("workerGroups"))):
        path = f"{PATH}.workerGroups[{index}]"
        entry = _dict(entry)
        name = entry.get("groupName")
        if name in seen:
            yield duplicate(f"{path}.groupName", shown(name))
        elif name not in groups:
            yield invalid(
                f"{path}.groupName",
                shown(name),
                "does not match any group name in workerGroupSpecs",
            )
        seen.add(str(name))
        yield from _rules_errors(path, entry, mode)


def _group_name_errors(cluster: RayCluster) -> Iterator[FieldError]:
    """KubeRay's rule: a group's name is part of its NetworkPolicy's name."""
    for index, group in enumerate(spec(cluster).get("workerGroupSpecs") or ()):
        path = f"spec.workerGroupSpecs[{index}].groupName"
        yield from dns1123_label_errors(path, str(group.get("groupName", "")))


def _dashboard_port_errors(cluster: RayCluster) -> Iterator[FieldError]:
    """The submitter rule of a RayJob's cluster opens the head's `dashboard-port`."""
    raw = (head_group(cluster).get("rayStartParams") or {}).get(DASHBOARD_PORT_PARAM)
    if raw is None or not re.fullmatch(r"[+-]?[0-9]{1,10}", str(raw)):
        return  # Not a number: KubeRay (and we) fall back to 8265.
    if not 1 <= int(str(raw)) <= 65535:
        path = "spec.headGroupSpec.rayStartParams.dashboard-port"
        yield invalid(path, shown(raw), f"{_PORT_RULE} (it is opened in the head's NetworkPolicy)")


def _rules_errors(path: str, rules: Mapping[str, Any], mode: str) -> Iterator[FieldError]:
    for field, direction, peers, allowed in (
        ("ingressRules", "ingress", "from", restricts_ingress(mode)),
        ("egressRules", "egress", "to", restricts_egress(mode)),
    ):
        listed = _list(rules.get(field))
        if listed and not allowed:
            yield forbidden(
                f"{path}.{field}",
                f'cannot be set when mode is "{mode}" ({direction} is not restricted)',
            )
            continue
        for index, rule in enumerate(listed):
            rule_path = f"{path}.{field}[{index}]"
            rule = _dict(rule)
            yield from _ports_errors(f"{rule_path}.ports", _list(rule.get("ports")))
            for peer_index, peer in enumerate(_list(rule.get(peers))):
                yield from _peer_errors(f"{rule_path}.{peers}[{peer_index}]", _dict(peer))


def _ports_errors(path: str, ports: list[Any]) -> Iterator[FieldError]:
    """Kubernetes' `ValidateNetworkPolicyPort`."""
    for index, port in enumerate(ports):
        port_path = f"{path}[{index}]"
        port = _dict(port)
        protocol = port.get("protocol")
        if protocol is not None and protocol not in _PROTOCOLS:
            yield not_supported(f"{port_path}.protocol", shown(protocol), _PROTOCOLS)
        number = port.get("port")
        end = port.get("endPort")
        if isinstance(number, int) and not isinstance(number, bool):
            if not 1 <= number <= 65535:
                yield invalid(f"{port_path}.port", number, _PORT_RULE)
            if end is not None and _is_int(end) and not number <= end <= 65535:
                yield invalid(f"{port_path}.endPort", end, "must be between port and 65535")
        elif isinstance(number, str):
            yield from port_name_errors(f"{port_path}.port", number)
            if end is not None:
                yield forbidden(
                    f"{port_path}.endPort", "may not be specified when port is non-numeric"
                )
        elif number is not None:
            yield invalid(f"{port_path}.port", shown(number), "must be a number or a port name")
        elif end is not None:
            yield required(f"{port_path}.port", "must be specified when endPort is specified")


def _peer_errors(path: str, peer: Mapping[str, Any]) -> Iterator[FieldError]:
    """Kubernetes' `ValidateNetworkPolicyPeer`: a selector (or two), or an ipBlock alone."""
    selectors = [field for field in ("podSelector", "namespaceSelector") if field in peer]
    if "ipBlock" in peer:
        if selectors:
            yield forbidden(path, "may not specify both ipBlock and another peer")
        yield from _ip_block_errors(f"{path}.ipBlock", _dict(peer["ipBlock"]))
    elif not selectors:
        yield required(path, "must specify a peer")
    for field in selectors:
        yield from _selector_errors(f"{path}.{field}", _dict(peer[field]))


def _selector_errors(path: str, selector: Mapping[str, Any]) -> Iterator[FieldError]:
    """apimachinery's `ValidateLabelSelector`."""
    labels = selector.get("matchLabels")
    for key, value in (labels if isinstance(labels, dict) else {}).items():
        yield from _qualified_name_errors(f"{path}.matchLabels", key)
        yield from _label_value_errors(f"{path}.matchLabels", value)
    for index, expression in enumerate(_list(selector.get("matchExpressions"))):
        expression_path = f"{path}.matchExpressions[{index}]"
        expression = _dict(expression)
        operator = expression.get("operator")
        values = _list(expression.get("values"))
        if operator in ("In", "NotIn") and not values:
            yield required(
                f"{expression_path}.values", "must be specified when `operator` is 'In' or 'NotIn'"
            )
        elif operator in ("Exists", "DoesNotExist") and values:
            yield forbidden(
                f"{expression_path}.values",
                "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            )
        elif operator not in _OPERATORS:
            yield not_supported(f"{expression_path}.operator", shown(operator), _OPERATORS)
        yield from _qualified_name_errors(f"{expression_path}.key", expression.get("key"))
        for value_index, value in enumerate(values):
            yield from _label_value_errors(f"{expression_path}.values[{value_index}]", value)


def _qualified_name_errors(path: str, key: Any) -> Iterator[FieldError]:
    prefix, slash, name = str(key).rpartition("/")
    bad_prefix = bool(slash) and (
        not prefix or len(prefix) > 253 or not _DNS1123_SUBDOMAIN_RE.fullmatch(prefix)
    )
    if bad_prefix or len(name) > 63 or not _LABEL_NAME_RE.fullmatch(name):
        yield invalid(path, shown(key), _QUALIFIED_NAME_RULE)


def _label_value_errors(path: str, value: Any) -> Iterator[FieldError]:
    text = str(value)
    if text and (len(text) > 63 or not _LABEL_NAME_RE.fullmatch(text)):
        yield invalid(path, shown(value), _LABEL_VALUE_RULE)


def _ip_block_errors(path: str, block: Mapping[str, Any]) -> Iterator[FieldError]:
    """Kubernetes' `ValidateIPBlock`: a CIDR, and `except` CIDRs strictly inside it."""
    cidr = _network(block.get("cidr"))
    if cidr is None:
        yield invalid(f"{path}.cidr", shown(block.get("cidr")), "must be a valid CIDR")
    for index, text in enumerate(_list(block.get("except"))):
        excepted = _network(text)
        if excepted is None:
            yield invalid(f"{path}.except[{index}]", shown(text), "must be a valid CIDR")
        elif cidr is not None and not (
            excepted.version == cidr.version
            and excepted.prefixlen > cidr.prefixlen
            and excepted.network_address in cidr
        ):
            yield invalid(
                f"{path}.except[{index}]", shown(text), "must be a strict subset of `cidr`"
            )


def _network(text: Any) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    """The CIDR as Go's `net.ParseCIDR` reads it (host bits allowed); None when it is not one."""
    if not isinstance(text, str) or "/" not in text or "%" in text:
        return None
    try:
        return ipaddress.ip_network(text, strict=False)
    except ValueError:
        return None


def _count_items(config: Mapping[str, Any]) -> int:
    """Everything the field repeats, counted in one pass over its fixed shape (no recursion)."""
    parts = [_dict(config.get("head")), _dict(config.get("worker"))]
    parts += [_dict(entry) for entry in _list(config.get("workerGroups"))]
    return len(parts) + sum(_rules_size(part) for part in parts)


def _built_items(cluster: RayCluster, config: Mapping[str, Any]) -> int:
    """What the built policies hold: one per policy plus its user rules (`worker`'s counted
    once per group that uses them)."""
    entries = {
        _dict(entry).get("groupName"): _rules_size(_dict(entry))
        for entry in _list(config.get("workerGroups"))
    }
    worker = _rules_size(_dict(config.get("worker")))
    total = 1 + _rules_size(_dict(config.get("head")))
    for group in spec(cluster).get("workerGroupSpecs") or ():
        total += 1 + entries.get(group.get("groupName"), worker)
    return total


def _rules_size(part: Mapping[str, Any]) -> int:
    count = 0
    for field, peers in (("ingressRules", "from"), ("egressRules", "to")):
        for rule in _list(part.get(field)):
            rule = _dict(rule)
            count += 1 + len(_list(rule.get("ports")))
            for peer in _list(rule.get(peers)):
                peer = _dict(peer)
                count += 1 + len(_list(_dict(peer.get("ipBlock")).get("except")))
                for selector in ("podSelector", "namespaceSelector"):
                    count += _selector_size(_dict(peer.get(selector)))
    return count


def _selector_size(selector: Mapping[str, Any]) -> int:
    size = len(_dict(selector.get("matchLabels")))
    for expression in _list(selector.get("matchExpressions")):
        size += 1 + len(_list(_dict(expression).get("values")))
    return size


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
