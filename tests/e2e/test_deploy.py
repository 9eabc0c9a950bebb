"""deploy/, the kustomize layout, checked offline and against the real binary:

- every overlay renders with `kubectl kustomize` (no cluster needed);
- every object validates against Kubernetes's schemas (PyPI kubernetes-validate, strict: unknown
  fields are errors, Kubernetes K8S_VERSION) and every Istio object against Istio's CRD schemas
  (npm @kubernetes-models/istio, tests/istio/validate.mjs); a failure names the object and field;
- what each mode needs is asserted: probes, security context, resources, the config dir, flags,
  replicas, PodDisruptionBudget and rollout strategy, Gateway TLS modes, SNI hosts, credentialName,
  the https redirect, the Service port's protocol;
- every overlay's container arguments run on the real binary (paths mapped into a temp root, the
  listener moved to 127.0.0.1 and port 0, `ha` against a real etcd over TLS with client
  certificates): it must start, answer /healthz, drain as the probes expect, and exit 0;
- the mode flags each Istio overlay adds are the ones test_proxies.py runs its proxies' backends with;
- `argocd-server`, tiphys in place of argocd-server in an Argo CD installation: its ServiceAccount,
  Role, ClusterRole, bindings and Service equal those of Argo CD's install.yaml (the pinned release,
  read from its Go module when Go is there), its Deployment keeps the name, labels, selector,
  ServiceAccount, container name and ports that the installation's Services and NetworkPolicies
  rely on, with a securityContext at least as strict; against the real kube-apiserver of
  controlplane.py, `kubectl apply -k` over upstream's objects (client-side and server-side) leaves
  exactly tiphys's container, and the container's arguments run as the pod would, with the
  ServiceAccount argocd-server's token and nothing else, on the installation's own settings.
"""

import base64
import hashlib
import hmac
import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from conftest import REPO, READY_TIMEOUT, TIPHYS_BIN, cli, clean_env, require_tool
from etcdkit import Etcd, EtcdTls
from test_proxies import PASSTHROUGH_FLAGS, TERMINATE_FLAGS, make_cert

DEPLOY = REPO / "deploy"
OVERLAYS = ("base", "ha", "istio-passthrough", "istio-terminate")
DROP_IN = "argocd-server"  # tiphys in place of Argo CD's argocd-server (its names, not tiphys's)
ALL_OVERLAYS = (*OVERLAYS, DROP_IN)
K8S_VERSION = "1.30"  # the oldest Kubernetes the manifests are written for (policy/v1, appProtocol)
ISTIO_VALIDATOR = REPO / "tests" / "istio" / "validate.mjs"
ISTIO_GROUP = "networking.istio.io/"
NAMESPACE = "argocd"


class DeployError(AssertionError):
    """An overlay that does not render or validate; the message names the object and field."""


def render(path):
    """The objects `kubectl kustomize path` renders (DeployError with kustomize's words if it cannot)."""
    kubectl = require_tool("kubectl")
    res = subprocess.run([kubectl, "kustomize", str(path)], capture_output=True, text=True, timeout=120,
                         stdin=subprocess.DEVNULL)
    if res.returncode != 0:
        raise DeployError(f"{path} does not render: {res.stderr.strip()}")
    # kustomize 2.0 (kubectl 1.20) leaves an empty document where `$patch: delete` removed an object.
    return [doc for doc in yaml.safe_load_all(res.stdout) if doc]


def ident(obj):
    return f"{obj.get('kind')}/{(obj.get('metadata') or {}).get('name')}"


def kubernetes_errors(objs):
    errors = []
    for obj in objs:
        if str(obj.get("apiVersion", "")).startswith(ISTIO_GROUP):
            continue
        try:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as err:
            field = ".".join(str(p) for p in err.absolute_path) or "(object)"
            errors.append(f"{ident(obj)}: {field}: {err.message}")
        except kubernetes_validate.SchemaNotFoundError as err:
            errors.append(f"{ident(obj)}: {err.message}")
    return errors


def istio_errors(objs):
    istio = [obj for obj in objs if str(obj.get("apiVersion", "")).startswith(ISTIO_GROUP)]
    if not istio:
        return []
    node = require_tool("node")
    if not (ISTIO_VALIDATOR.parent / "node_modules" / "@kubernetes-models" / "istio").is_dir():
        pytest.fail("Istio's schemas are not installed: npm ci --prefix tests/istio (bash .ci/test-all does)")
    res = subprocess.run([node, str(ISTIO_VALIDATOR)], input=json.dumps(istio), capture_output=True, text=True,
                         timeout=60, cwd=ISTIO_VALIDATOR.parent)
    assert res.returncode == 0, f"the Istio validator failed: {res.stderr}"
    return [f"{r['kind']}/{r['name']}: {e}" for r in json.loads(res.stdout) for e in r["errors"]]


class _TsType:
    """The shape of a field as a TypeScript declaration (.d.ts) of @kubernetes-models states it:
    `fields` for an object literal, `item` for Array<...> and map values, neither for a leaf."""

    def __init__(self, fields=None, item=None):
        self.fields, self.item = fields, item


def _skip_to_end(text, i):
    """The index of the `;`, `>` or `}` that ends the type running through text[i:]."""
    depth = 0
    while depth or text[i] not in ";>}":
        depth += {"{": 1, "(": 1, "<": 1, "}": -1, ")": -1, ">": -1}.get(text[i], 0)
        i += 1
    return i


def _parse_ts_type(text, i):
    """Parses the type at text[i:] (comments removed); returns (_TsType, index after it). Of an
    intersection (`{...} & (Exclude<...> | ...)`, Istio's oneOf), the first object's fields count."""
    shape, i = _parse_ts_type_head(text, i)
    return shape, _skip_to_end(text, i)


def _parse_ts_type_head(text, i):
    while text[i].isspace():
        i += 1
    if text.startswith("Array<", i):
        item, i = _parse_ts_type(text, i + len("Array<"))
        while text[i].isspace():
            i += 1
        assert text[i] == ">", text[i - 40:i + 40]
        return _TsType(item=item), i + 1
    if text[i] == "{":
        fields, item, i = {}, None, i + 1
        while True:
            while text[i].isspace():
                i += 1
            if text[i] == "}":
                return _TsType(fields=None if item else fields, item=item), i + 1
            m = re.compile(r'"([^"]+)"\??:|\[key: string\]:').match(text, i)
            assert m, f"unexpected declaration: {text[i:i + 80]}"
            value, i = _parse_ts_type(text, m.end())
            if m.group(1) is None:
                item = value
            else:
                fields[m.group(1)] = value
            while text[i].isspace():
                i += 1
            if text[i] == ";":
                i += 1
    return _TsType(), i  # a leaf: a primitive or a union of literals


def _unknown_fields(value, shape, path):
    if shape.fields is not None and isinstance(value, dict):
        for key, child in value.items():
            if key not in shape.fields:
                yield f"{path}/{key}: unknown field (the API server would drop it)"
            else:
                yield from _unknown_fields(child, shape.fields[key], f"{path}/{key}")
    elif shape.item is not None and isinstance(value, dict):
        for key, child in value.items():
            yield from _unknown_fields(child, shape.item, f"{path}/{key}")
    elif shape.item is not None and isinstance(value, list):
        for n, child in enumerate(value):
            yield from _unknown_fields(child, shape.item, f"{path}/{n}")


def istio_unknown_fields(objs):
    """Fields of an Istio object's spec that Istio's schema does not have (its CRD validation lets
    them through, and the API server prunes them silently): read from the package's declarations."""
    models = ISTIO_VALIDATOR.parent / "node_modules" / "@kubernetes-models" / "istio"
    errors = []
    for obj in objs:
        if not str(obj.get("apiVersion", "")).startswith(ISTIO_GROUP):
            continue
        group_version = obj["apiVersion"]
        declaration = models / group_version / f"{obj['kind']}.d.ts"
        if not declaration.is_file():
            errors.append(f"{ident(obj)}: no Istio declaration for {group_version} {obj['kind']}")
            continue
        text = re.sub(r"/\*.*?\*/", "", declaration.read_text(), flags=re.S)
        spec, _ = _parse_ts_type(text, text.index('"spec"?:') + len('"spec"?:'))
        errors += [f"{ident(obj)}: {e}" for e in _unknown_fields(obj.get("spec", {}), spec, "/spec")]
    return errors


def validate(objs):
    errors = kubernetes_errors(objs) + istio_errors(objs) + istio_unknown_fields(objs)
    if errors:
        raise DeployError("invalid objects:\n  " + "\n  ".join(errors))


@pytest.fixture(scope="module")
def rendered():
    """overlay -> its validated objects, rendered once per module."""
    out = {}
    for overlay in ALL_OVERLAYS:
        objs = render(DEPLOY / overlay)
        validate(objs)
        out[overlay] = objs
    return out


def only(objs, kind, api=None):
    found = [o for o in objs if o["kind"] == kind and (api is None or o["apiVersion"].startswith(api))]
    assert len(found) == 1, f"expected one {kind}, found {[ident(o) for o in found]}"
    return found[0]


def container(objs):
    containers = only(objs, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def flag_values(args):
    """[--flag=value, --switch] -> {flag: value, switch: True} (the manifests write flags with `=`)."""
    flags = {}
    for arg in args:
        if arg.startswith("--"):
            name, eq, value = arg.partition("=")
            flags[name] = value if eq else True
    return flags


def quantity(q):
    """A Kubernetes quantity (cpu or memory) as a float in base units."""
    units = {"m": 1e-3, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "k": 1e3, "M": 1e6, "G": 1e9}
    m = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", str(q))
    assert m, f"not a quantity: {q}"
    return float(m.group(1)) * units.get(m.group(2), 1)


def go_duration_seconds(text):
    total = 0.0
    for number, unit in re.findall(r"([0-9.]+)(ms|s|m|h)", text):
        total += float(number) * {"ms": 1e-3, "s": 1, "m": 60, "h": 3600}[unit]
    return total


# ---- rendering and schemas --------------------------------------------------------------------

@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_renders_and_validates(overlay, rendered):
    kinds = sorted(ident(o) for o in rendered[overlay])
    expected = {"Deployment/tiphys", "Service/tiphys", "ServiceAccount/tiphys"}
    assert expected <= set(kinds), kinds
    if overlay.startswith("istio-"):
        assert {"Gateway/tiphys", "VirtualService/tiphys"} <= set(kinds), kinds


def test_bad_overlay_is_named(tmp_path):
    """An overlay that does not render, or renders objects the schemas refuse, fails naming them."""
    base = os.path.relpath(DEPLOY / "base", tmp_path / "broken")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "kustomization.yaml").write_text(f"bases:\n  - {base}\nresources:\n  - missing.yaml\n")
    with pytest.raises(DeployError, match="missing.yaml"):
        render(broken)

    (broken / "kustomization.yaml").write_text(f"bases:\n  - {base}\npatchesStrategicMerge:\n  - typo.yaml\n")
    (broken / "typo.yaml").write_text(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: tiphys}\nspec:\n  template:\n    spec:\n"
        "      containers:\n        - name: tiphys\n          livenessProbe: {periodSecond: 10}\n")
    with pytest.raises(DeployError) as err:
        validate(render(broken))
    message = str(err.value)
    assert "Deployment/tiphys" in message and "containers.0.livenessProbe" in message, message
    assert "periodSecond" in message, message


def test_bad_istio_object_is_named(rendered):
    gateway = json.loads(json.dumps(only(rendered["istio-passthrough"], "Gateway")))
    gateway["spec"]["servers"][0]["tls"]["mode"] = "PASSTHRU"
    errors = istio_errors([gateway])
    assert errors and "Gateway/tiphys" in errors[0] and "/spec/servers/0/tls/mode" in errors[0], errors

    service = json.loads(json.dumps(only(rendered["istio-passthrough"], "VirtualService")))
    service["spec"]["tls"][0]["match"][0]["sniHost"] = ["cd.example.com"]
    service["spec"]["http"][0]["timout"] = "10s"
    assert istio_errors([service]) == [], "Istio's CRD schema lets unknown fields through"
    assert sorted(istio_unknown_fields([service])) == [
        "VirtualService/tiphys: /spec/http/0/timout: unknown field (the API server would drop it)",
        "VirtualService/tiphys: /spec/tls/0/match/0/sniHost: unknown field (the API server would drop it)"]
    with pytest.raises(DeployError, match="sniHost"):
        validate([service])


# ---- what every overlay's pod must be ---------------------------------------------------------

@pytest.mark.parametrize("overlay", ALL_OVERLAYS)
def test_pod_security_and_probes(overlay, rendered):
    objs = rendered[overlay]
    pod = only(objs, "Deployment")["spec"]["template"]["spec"]
    c = container(objs)
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    server_port = ports["server"]
    assert flag_values(c["args"]).get("--port", "8080") == str(server_port)
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        get = c[probe]["httpGet"]
        assert get["path"] == "/healthz", probe
        assert ports.get(get["port"], get["port"]) == server_port, probe
        assert get.get("scheme", "HTTP") == "HTTP", f"{probe}: /healthz is answered in plain http in every mode"
    # The drain (README, "Stopping and rolling updates"): out of rotation at the first failed probe.
    assert c["readinessProbe"]["failureThreshold"] == 1
    flags = flag_values(c["args"])
    drain = go_duration_seconds(flags["--shutdown-delay"]) + go_duration_seconds(flags["--shutdown-timeout"])
    assert pod["terminationGracePeriodSeconds"] > drain
    assert "lifecycle" not in c, "no preStop hook: the server keeps serving through --shutdown-delay"

    psc, sc = pod["securityContext"], c["securityContext"]
    assert psc["runAsNonRoot"] is True and sc["runAsNonRoot"] is True
    assert isinstance(sc["runAsUser"], int) and sc["runAsUser"] > 0
    assert psc["seccompProfile"]["type"] == "RuntimeDefault" == sc["seccompProfile"]["type"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    # A token only where the server talks to the API server (--kube).
    assert pod["automountServiceAccountToken"] is ("--kube" in flags)
    assert pod["serviceAccountName"] == only(objs, "ServiceAccount")["metadata"]["name"]

    # BENCHMARKS.md: 155-162 MiB at the peak with 10,000 applications and 1,000 watchers.
    res = c["resources"]
    assert quantity(res["requests"]["memory"]) >= 150 * 2**20
    assert quantity(res["limits"]["memory"]) >= 1.5 * quantity(res["requests"]["memory"])
    assert 0 < quantity(res["requests"]["cpu"]) <= quantity(res["limits"]["cpu"])


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_config_dir_mounts_argo_cd_objects(overlay, rendered):
    """--config-dir holds argocd-cm, argocd-rbac-cm and argocd-secret as Kubernetes mounts them
    (one file per key), from the objects of those names, optional so that none is created here."""
    objs = rendered[overlay]
    c = container(objs)
    pod = only(objs, "Deployment")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    config_dir = flag_values(c["args"])["--config-dir"]
    for name, source in (("argocd-cm", "configMap"), ("argocd-rbac-cm", "configMap"), ("argocd-secret", "secret")):
        mount = mounts[f"{config_dir}/{name}"]
        assert mount.get("readOnly") is True
        volume = volumes[mount["name"]][source]
        assert volume.get("name", volume.get("secretName")) == name
        assert volume["optional"] is True
    kinds = {(o["kind"], o["metadata"]["name"]) for o in objs}
    assert not kinds & {("ConfigMap", "argocd-cm"), ("ConfigMap", "argocd-rbac-cm"), ("Secret", "argocd-secret")}, \
        "the kit must not overwrite a user's Argo CD objects"
    data = mounts[flag_values(c["args"])["--data-dir"]]
    assert data.get("readOnly") is not True


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_service_has_one_port_to_the_server(overlay, rendered):
    objs = rendered[overlay]
    svc = only(objs, "Service")
    dep = only(objs, "Deployment")
    assert len(svc["spec"]["ports"]) == 1
    assert svc["spec"]["ports"][0]["targetPort"] == "server"
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= labels.items()
    assert dep["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_base_is_one_replica_on_a_volume(rendered):
    objs = rendered["base"]
    dep = only(objs, "Deployment")
    assert dep["spec"]["replicas"] == 1
    assert dep["spec"]["strategy"]["type"] == "Recreate", "one server per data dir"
    c = container(objs)
    flags = flag_values(c["args"])
    assert not any(f.startswith("--etcd") for f in flags)
    assert "--insecure" not in flags
    mount = next(m for m in c["volumeMounts"] if m["mountPath"] == flags["--data-dir"])
    volume = next(v for v in dep["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"])
    assert volume["persistentVolumeClaim"]["claimName"] == only(objs, "PersistentVolumeClaim")["metadata"]["name"]
    svc_port = only(objs, "Service")["spec"]["ports"][0]
    assert svc_port["appProtocol"] == "https"


def test_ha_replicas_on_etcd(rendered):
    objs = rendered["ha"]
    dep = only(objs, "Deployment")
    spec = dep["spec"]
    assert spec["replicas"] == 3
    rolling = spec["strategy"]["rollingUpdate"]
    assert spec["strategy"]["type"] == "RollingUpdate"
    assert rolling["maxUnavailable"] == 0 and rolling["maxSurge"] == 1
    assert spec["replicas"] - rolling["maxUnavailable"] >= 2, "a rollout never drops below two ready"
    pdb = only(objs, "PodDisruptionBudget")
    labels = spec["template"]["metadata"]["labels"]
    assert pdb["spec"]["minAvailable"] == 2
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    pod = spec["template"]["spec"]
    spread = {t["topologyKey"]: t for t in pod["topologySpreadConstraints"]}
    assert spread["kubernetes.io/hostname"]["maxSkew"] == 1
    assert spread["kubernetes.io/hostname"]["labelSelector"]["matchLabels"].items() <= labels.items()
    anti = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"

    c = container(objs)
    flags = flag_values(c["args"])
    assert flags["--etcd-endpoints"] == "$(ETCD_ENDPOINTS)"
    env = {e["name"]: e for e in c["env"]}
    assert env["ETCD_ENDPOINTS"]["valueFrom"]["configMapKeyRef"] == {"name": "tiphys-etcd", "key": "endpoints"}
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    for flag, key in (("--etcd-cacert", "ca.crt"), ("--etcd-cert", "tls.crt"), ("--etcd-key", "tls.key")):
        directory, _, file = flags[flag].rpartition("/")
        assert file == key
        assert volumes[mounts[directory]]["secret"]["secretName"] == "tiphys-etcd-tls"
    assert "--secrets-key-file" in flags, "on etcd, give a key file (README, Credentials at rest)"
    # Per replica, the data dir keeps only the generated certificate: no shared claim.
    assert volumes[mounts[flags["--data-dir"]]] == {"name": "data", "emptyDir": {}}
    assert not [o for o in objs if o["kind"] == "PersistentVolumeClaim"]


def _gateway_servers(objs):
    return {s["port"]["number"]: s for s in only(objs, "Gateway", ISTIO_GROUP)["spec"]["servers"]}


def _destinations(routes):
    return [(d["destination"]["host"], d["destination"]["port"]["number"]) for r in routes for d in r["route"]]


def test_istio_passthrough(rendered):
    objs = rendered["istio-passthrough"]
    servers = _gateway_servers(objs)
    tls = servers[443]
    assert tls["port"]["protocol"] == "TLS" and tls["tls"]["mode"] == "PASSTHROUGH"
    assert "credentialName" not in tls["tls"], "passthrough: the gateway holds no certificate"
    plain = servers[80]
    assert plain["port"]["protocol"] == "HTTP" and "tls" not in plain, "port 80 reaches tiphys's own redirect"
    vs = only(objs, "VirtualService")["spec"]
    gateway = only(objs, "Gateway")["metadata"]["name"]
    assert vs["gateways"] == [gateway]
    svc = only(objs, "Service")
    target = (svc["metadata"]["name"], svc["spec"]["ports"][0]["port"])
    [route] = vs["tls"]
    [match] = route["match"]
    assert match["port"] == 443 and sorted(match["sniHosts"]) == sorted(tls["hosts"])
    assert _destinations([route]) == [target]
    [http] = vs["http"]
    assert http["match"] == [{"port": 80}] and _destinations([http]) == [target]
    assert svc["spec"]["ports"][0]["appProtocol"] == "https"

    c = container(objs)
    flags = flag_values(c["args"])
    assert "--insecure" not in flags
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in only(objs, "Deployment")["spec"]["template"]["spec"]["volumes"]}
    for flag, key in (("--tls-cert", "tls.crt"), ("--tls-key", "tls.key")):
        directory, _, file = flags[flag].rpartition("/")
        assert file == key and volumes[mounts[directory]]["secret"]["secretName"] == "argocd-server-tls"


def test_istio_terminate(rendered):
    objs = rendered["istio-terminate"]
    servers = _gateway_servers(objs)
    https = servers[443]
    assert https["port"]["protocol"] == "HTTPS" and https["tls"]["mode"] == "SIMPLE"
    assert https["tls"]["credentialName"]
    plain = servers[80]
    assert plain["port"]["protocol"] == "HTTP" and plain["tls"] == {"httpsRedirect": True}
    assert plain["hosts"] == https["hosts"]
    vs = only(objs, "VirtualService")["spec"]
    assert "tls" not in vs
    svc = only(objs, "Service")
    port = svc["spec"]["ports"][0]
    # Istio speaks HTTP/2 to the pods (so native gRPC passes) when the port says so.
    assert port.get("appProtocol") in ("http2", "grpc", "kubernetes.io/h2c") or \
        re.match(r"^(http2|grpc)(-|$)", port["name"]), port
    assert _destinations(vs["http"]) == [(svc["metadata"]["name"], port["port"])]
    flags = flag_values(container(objs)["args"])
    assert flags.get("--insecure") is True
    assert not {"--tls-cert", "--tls-key"} & set(flags)


@pytest.mark.parametrize("overlay, proven_by", [("istio-terminate", TERMINATE_FLAGS),
                                                ("istio-passthrough", PASSTHROUGH_FLAGS)])
def test_mode_flags_match_the_proxy_tests(overlay, proven_by, rendered):
    """The flags an Istio overlay adds to base are those test_proxies.py's backends run with."""
    base = set(flag_values(container(rendered["base"])["args"]))
    added = set(flag_values(container(rendered[overlay])["args"])) - base
    assert added == {f.split("=", 1)[0] for f in proven_by}


# ---- argocd-server: tiphys in place of Argo CD's argocd-server --------------------------------

# argocd-server's objects in Argo CD's install.yaml that the overlay brings, equal to upstream's.
UPSTREAM_SAME = ("ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding", "Service")
UPSTREAM_NAME = "argocd-server"


def by_ident(objs):
    return {(o["kind"], o["metadata"]["name"]): o for o in objs}


@pytest.fixture(scope="module")
def upstream():
    """The objects of Argo CD's manifests/install.yaml at the release tools/upstream pins, by
    (kind, name), from its Go module (controlplane.argocd_module_dir: `go mod download`)."""
    if not shutil.which("go"):
        pytest.skip("Go is not installed: Argo CD's install.yaml is read from its Go module")
    from controlplane import PartFailed, argocd_module_dir  # noqa: PLC0415
    try:
        install = argocd_module_dir() / "manifests" / "install.yaml"
    except PartFailed as e:
        pytest.fail(str(e))
    return by_ident(doc for doc in yaml.safe_load_all(install.read_text()) if doc)


def selects(selector, labels):
    """Whether a label selector (matchLabels only; a matchExpressions fails the test) selects `labels`."""
    assert not selector.get("matchExpressions"), f"a selector with matchExpressions: {selector}"
    match = selector.get("matchLabels", selector)
    return match.items() <= labels.items()


def test_drop_in_objects(rendered):
    """Only argocd-server's own objects, by Argo CD's names; no settings object of the user's."""
    assert sorted(ident(o) for o in rendered[DROP_IN]) == sorted(
        f"{kind}/{UPSTREAM_NAME}" for kind in (*UPSTREAM_SAME, "Deployment"))


def test_drop_in_runs_kube_on_its_own_namespace(rendered):
    objs = rendered[DROP_IN]
    dep = only(objs, "Deployment")
    pod = dep["spec"]["template"]["spec"]
    c = container(objs)
    flags = flag_values(c["args"])
    assert c["args"][0] == "server" and flags.get("--kube") is True
    # In the pod: the ServiceAccount's token and the pod's namespace, nothing else to give.
    assert "--kubeconfig" not in flags and "--namespace" not in flags
    # Settings are the installation's argocd-cm, argocd-rbac-cm and argocd-secret, read and
    # followed through the API server (an edit applies at once): no config dir, no mounts.
    assert "--config-dir" not in flags
    assert {m["mountPath"] for m in c["volumeMounts"]} == {flags["--data-dir"]}, c["volumeMounts"]
    assert not any(f.startswith("--etcd") for f in flags)
    env = {e["name"]: e for e in c["env"]}
    assert env["ARGOCD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    # argocd-cmd-params-cm is read as upstream's Deployment reads it, each key optional.
    refs = [e["valueFrom"]["configMapKeyRef"] for e in c["env"] if "configMapKeyRef" in e.get("valueFrom", {})]
    assert refs and all(r["name"] == "argocd-cmd-params-cm" and r["optional"] is True for r in refs), refs
    assert env["TIPHYS_SERVER_INSECURE"]["valueFrom"]["configMapKeyRef"]["key"] == "server.insecure"
    # The state is the API server's: the data dir is per pod, and pods roll one at a time.
    volumes = {v["name"]: v for v in pod["volumes"]}
    data = next(m for m in c["volumeMounts"] if m["mountPath"] == flags["--data-dir"])
    assert volumes[data["name"]] == {"name": data["name"], "emptyDir": {}}
    assert dep["spec"]["replicas"] == 1, "one replica unless argocd-secret holds server.secretkey"
    rolling = dep["spec"]["strategy"]["rollingUpdate"]
    assert dep["spec"]["strategy"]["type"] == "RollingUpdate" and rolling["maxUnavailable"] == 0
    assert not [o for o in objs if o["kind"] == "PersistentVolumeClaim"]
    # Both of argocd-server's Service ports reach the one server port.
    svc = only(objs, "Service")
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert sorted((p["name"], p["port"]) for p in svc["spec"]["ports"]) == [("http", 80), ("https", 443)]
    assert {p["targetPort"] for p in svc["spec"]["ports"]} == {ports["server"]}
    assert selects(svc["spec"]["selector"], dep["spec"]["template"]["metadata"]["labels"])
    assert dep["spec"]["selector"]["matchLabels"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()
    # The ClusterRoleBinding names the ServiceAccount in the namespace Argo CD installs into.
    crb = only(objs, "ClusterRoleBinding")
    assert crb["subjects"] == [{"kind": "ServiceAccount", "name": pod["serviceAccountName"], "namespace": NAMESPACE}]


def test_drop_in_equals_upstream(rendered, upstream):
    """The ServiceAccount, Role, ClusterRole, bindings and Service are Argo CD's, field for field,
    so an installation's RBAC and Service apply to tiphys unchanged (and applying them changes
    nothing there)."""
    ours = by_ident(rendered[DROP_IN])
    for kind in UPSTREAM_SAME:
        mine, theirs = ours[(kind, UPSTREAM_NAME)], upstream[(kind, UPSTREAM_NAME)]
        assert mine["apiVersion"] == theirs["apiVersion"], kind
        assert mine["metadata"] == theirs["metadata"], kind
        fields = set(mine) | set(theirs)
        for field in sorted(fields - {"apiVersion", "kind", "metadata"}):
            assert mine.get(field) == theirs.get(field), f"{kind}/{UPSTREAM_NAME}: {field} differs from Argo CD's"


def test_drop_in_deployment_keeps_what_the_installation_relies_on(rendered, upstream):
    ours = only(rendered[DROP_IN], "Deployment")
    theirs = upstream[("Deployment", UPSTREAM_NAME)]
    assert ours["metadata"]["labels"] == theirs["metadata"]["labels"]
    assert ours["spec"]["selector"] == theirs["spec"]["selector"], "a Deployment's selector cannot change"
    labels = ours["spec"]["template"]["metadata"]["labels"]
    assert theirs["spec"]["template"]["metadata"]["labels"].items() <= labels.items()
    pod, their_pod = ours["spec"]["template"]["spec"], theirs["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == their_pod["serviceAccountName"]
    [c] = pod["containers"]
    [their_c] = their_pod["containers"]
    assert c["name"] == their_c["name"], "an apply over the installation must replace upstream's container"
    ports = {p["containerPort"] for p in c["ports"]}
    assert {p["containerPort"] for p in their_c["ports"]} <= ports
    # At least as strict as upstream's container.
    for key, value in their_c["securityContext"].items():
        assert c["securityContext"].get(key) == value, f"securityContext.{key}"
    assert pod["nodeSelector"] == their_pod["nodeSelector"]

    # Every Service of the installation that selects upstream's pods selects tiphys's, on a port it has.
    their_labels = theirs["spec"]["template"]["metadata"]["labels"]
    services = [o for o in upstream.values() if o["kind"] == "Service" and o["spec"].get("selector")
                and selects(o["spec"]["selector"], their_labels)]
    assert {s["metadata"]["name"] for s in services} >= {"argocd-server", "argocd-server-metrics"}
    for svc in services:
        assert selects(svc["spec"]["selector"], labels), ident(svc)
        for port in svc["spec"]["ports"]:
            assert port["targetPort"] in ports, f"{ident(svc)} port {port['name']}: {port['targetPort']}"
    # ... and so does every NetworkPolicy: the ones of the server itself, and those that let
    # argocd-server's pods in (Redis, the repo-server, Dex).
    seen = 0
    for policy in (o for o in upstream.values() if o["kind"] == "NetworkPolicy"):
        if selects(policy["spec"]["podSelector"], their_labels):
            assert selects(policy["spec"]["podSelector"], labels), ident(policy)
            seen += 1
        for rule in policy["spec"].get("ingress") or []:
            for peer in rule.get("from") or []:
                if "podSelector" in peer and selects(peer["podSelector"], their_labels):
                    assert selects(peer["podSelector"], labels), f"{ident(policy)}: {peer}"
                    seen += 1
    assert seen >= 2, "no NetworkPolicy of install.yaml names argocd-server's pods any more"


# ---- the overlays' arguments on the real binary ----------------------------------------------

OVERRIDES = {"--address": "127.0.0.1", "--port": "0", "--metrics-address": "127.0.0.1", "--metrics-port": "0"}


def _kubelet_mount(directory, data):
    """Writes `data` (key -> bytes) as the kubelet mounts a ConfigMap or Secret: a timestamped dir,
    `..data` pointing at it, and one symlink per key."""
    directory.mkdir(parents=True, exist_ok=True)
    stamp = directory / "..2026_01_01_00_00_00.000000001"
    stamp.mkdir()
    for key, value in data.items():
        (stamp / key).write_bytes(value)
    (directory / "..data").symlink_to(stamp.name)
    for key in data:
        (directory / key).symlink_to(f"..data/{key}")


class Pod:
    """The Deployment's one container started as `TIPHYS_BIN` with its args and env, its volumes
    under a temp root (`objects`: ConfigMap/Secret name -> {key: bytes}; others empty)."""

    def __init__(self, objs, root, objects=None, config_maps=None, wrapper=(), extra_env=None, extra_args=()):
        dep = only(objs, "Deployment")
        c = container(objs)
        pod = dep["spec"]["template"]["spec"]
        self.root = root
        volumes = {v["name"]: v for v in pod["volumes"]}
        for mount in c.get("volumeMounts", []):
            volume = volumes[mount["name"]]
            source = volume.get("configMap", {}).get("name") or volume.get("secret", {}).get("secretName")
            where = self.path(mount["mountPath"])
            if source and source in (objects or {}):
                _kubelet_mount(where, objects[source])
            else:
                where.mkdir(parents=True, exist_ok=True)  # an absent optional object: an empty dir
        env = {}
        for item in c.get("env", []):
            if "value" in item:
                env[item["name"]] = item["value"]
            elif item["valueFrom"].get("fieldRef", {}).get("fieldPath") == "metadata.namespace":
                env[item["name"]] = NAMESPACE
            else:
                ref = item["valueFrom"]["configMapKeyRef"]
                value = (config_maps or {}).get(ref["name"], {}).get(ref["key"])
                if value is None and ref.get("optional"):
                    continue  # the kubelet leaves the variable unset
                env[item["name"]] = (config_maps or {})[ref["name"]][ref["key"]]
        args = [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], a) for a in c["args"]]
        assert args[0] == "server", args
        out = []
        for arg in args[1:]:
            name, eq, value = arg.partition("=")
            if name in OVERRIDES:
                continue
            out.append(f"{name}={self.path(value)}" if eq and value.startswith("/") else arg)
        self.ready = root / "ready.json"
        self.args = ["server", *out, *extra_args, *(f"{k}={v}" for k, v in OVERRIDES.items()),
                     f"--ready-file={self.ready}"]
        self.env = clean_env(NO_COLOR="1", **{**env, **(extra_env or {})})
        self.wrapper = list(wrapper)
        self.data_dir = Path(self.path(flag_values(c["args"])["--data-dir"]))
        self.proc = None

    def path(self, p):
        return self.root / p.lstrip("/") if p.startswith("/") else p

    def start(self):
        log = self.root / "server.log"
        with open(log, "wb") as out:
            self.proc = subprocess.Popen([*self.wrapper, TIPHYS_BIN, *self.args], stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=self.env)
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"tiphys refused the overlay's arguments (exit {self.proc.returncode}): "
                                     f"{' '.join(self.args)}\n{self.log()}")
            if self.ready.exists():
                try:
                    self.port = json.loads(self.ready.read_text())["port"]
                    return self
                except ValueError:
                    pass
            time.sleep(0.05)
        self.kill()
        raise AssertionError(f"tiphys wrote no ready file within {READY_TIMEOUT} s\n{self.log()}")

    def log(self):
        return (self.root / "server.log").read_text(errors="replace")[-4000:]

    def healthz(self):
        res = subprocess.run(["curl", "-sS", "--max-time", "5", "-w", " %{http_code}",
                              f"http://127.0.0.1:{self.port}/healthz"], capture_output=True, text=True, timeout=15)
        assert res.returncode == 0, res.stderr
        body, status = res.stdout.rsplit(" ", 1)
        return [body.strip(), status]

    def drain(self):
        """SIGTERM: /healthz turns 503 `shutting down` (the readiness probe takes the pod out of
        rotation) while the server still answers; a second SIGTERM skips the rest; exit 0."""
        self.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 5
        body, status = self.healthz()
        while status != "503" and time.monotonic() < deadline:
            time.sleep(0.1)
            body, status = self.healthz()
        assert (body, status) == ("shutting down", "503"), self.log()
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(timeout=30) == 0, self.log()

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


@pytest.fixture
def pods():
    started = []

    def make(*args, **kw):
        pod = Pod(*args, **kw)
        started.append(pod)
        return pod

    yield make
    for pod in started:
        pod.kill()


def _rest_login(url, password, *curl_args):
    res = subprocess.run(["curl", "-sS", "--max-time", "10", *curl_args, "-H", "Content-Type: application/json",
                          "-d", json.dumps({"username": "admin", "password": password}),
                          f"{url}/api/v1/session"], capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_base_args_run_and_quick_start_works(rendered, pods, tmp_path):
    """The base pod as the quick start uses it: no Argo CD objects (empty optional mounts), the
    generated admin password read with `tiphys admin initial-password`, then a login."""
    pod = pods(rendered["base"], tmp_path).start()
    assert pod.healthz() == ["ok", "200"]
    res = cli("admin", "initial-password", "--data-dir", str(pod.data_dir))
    assert res.returncode == 0, res.stderr
    password = res.stdout.split()[0]
    token = _rest_login(f"https://127.0.0.1:{pod.port}", password, "-k").get("token")
    assert token and token.count(".") == 2
    pod.drain()


def test_base_reads_existing_argo_cd_objects(rendered, pods, tmp_path):
    """A user's argocd-cm, argocd-rbac-cm and argocd-secret, as the kubelet mounts them, take effect."""
    objects = {
        "argocd-cm": {"admin.enabled": b"true", "users.anonymous.enabled": b"true"},
        "argocd-rbac-cm": {"policy.default": b"role:readonly"},
        "argocd-secret": {"server.secretkey": base64.b64encode(os.urandom(32))},
    }
    pod = pods(rendered["base"], tmp_path, objects=objects).start()
    url = f"https://127.0.0.1:{pod.port}"
    # Anonymous access (argocd-cm) with role:readonly by default (argocd-rbac-cm): no token needed.
    res = subprocess.run(["curl", "-sS", "-k", "--max-time", "10", "-w", "\n%{http_code}", f"{url}/api/v1/projects"],
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    body, _, status = res.stdout.rpartition("\n")
    assert status == "200" and "items" in json.loads(body), res.stdout
    # Tokens are signed with argocd-secret's server.secretkey.
    res = cli("admin", "initial-password", "--data-dir", str(pod.data_dir))
    assert res.returncode == 0, res.stderr
    token = _rest_login(url, res.stdout.split()[0], "-k")["token"]
    head, payload, signature = token.split(".")
    mac = hmac.new(objects["argocd-secret"]["server.secretkey"], f"{head}.{payload}".encode(), hashlib.sha256)
    assert base64.urlsafe_b64encode(mac.digest()).rstrip(b"=").decode() == signature
    pod.drain()


def test_ha_args_run_on_etcd_over_tls(rendered, pods, tmp_path):
    tls = EtcdTls(tmp_path / "etcd-tls")
    etcd = Etcd(tmp_path / "etcd", tls=tls)
    try:
        objects = {
            "tiphys-etcd-tls": {"ca.crt": tls.ca.read_bytes(), "tls.crt": tls.client_cert.read_bytes(),
                                "tls.key": tls.client_key.read_bytes()},
            "tiphys-secrets-key": {"keys": base64.b64encode(os.urandom(32)) + b"\n"},
        }
        endpoints = {"tiphys-etcd": {"endpoints": ",".join(etcd.endpoints)}}
        pod = pods(rendered["ha"], tmp_path / "pod", objects=objects, config_maps=endpoints)
        assert any(a.startswith("--etcd-endpoints=https://127.0.0.1:") for a in pod.args), pod.args
        pod.start()
        assert pod.healthz() == ["ok", "200"], pod.log()
        assert "etcd" in pod.log().lower()
        pod.drain()
    finally:
        etcd.stop()


def test_istio_passthrough_args_run(rendered, pods, tmp_path):
    crt, key = make_cert(tmp_path)
    pod = pods(rendered["istio-passthrough"], tmp_path / "pod",
               objects={"argocd-server-tls": {"tls.crt": crt.read_bytes(), "tls.key": key.read_bytes()}}).start()
    res = subprocess.run(["curl", "-sS", "--max-time", "10", "--cacert", str(crt), "-w", " %{http_code}",
                          "-o", "/dev/null", f"https://localhost:{pod.port}/api/version"],
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr  # the certificate from the mounted Secret is served
    assert res.stdout.strip() == "200"
    pod.drain()


def test_istio_terminate_args_run(rendered, pods, tmp_path):
    pod = pods(rendered["istio-terminate"], tmp_path).start()
    res = subprocess.run(["curl", "-sS", "--max-time", "10", "--http2-prior-knowledge", "-w", " %{http_version}",
                          "-o", "/dev/null", f"http://127.0.0.1:{pod.port}/api/version"],
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "2", "h2c, as Istio speaks to an http2 port"
    pod.drain()


def test_unknown_flag_fails(rendered, pods, tmp_path):
    objs = json.loads(json.dumps(rendered["base"]))
    container(objs)["args"].append("--no-such-flag=1")
    with pytest.raises(AssertionError, match="no-such-flag"):
        pods(objs, tmp_path).start()


def test_every_istio_overlay_is_linked_from_the_readme():
    readme = (REPO / "README.md").read_text()
    for overlay in ALL_OVERLAYS:
        assert f"deploy/{overlay}" in readme, overlay
    assert "tests/e2e/test_proxies.py" in readme



# ---- argocd-server on a real API server (controlplane.py; run under tools/upstream/isolated) ---

def _as_list(objs):
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objs)})


def _rest(method, url, token, body=None):
    """(status, JSON body or None) of a REST call with a bearer token (TLS unverified: the pod's
    generated certificate)."""
    args = ["curl", "-sS", "-k", "--max-time", "10", "-X", method, "-H", f"Authorization: Bearer {token}",
            "-w", "\n%{http_code}"]
    if body is not None:
        args += ["-H", "Content-Type: application/json", "-d", json.dumps(body)]
    res = subprocess.run([*args, url], capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    text, _, status = res.stdout.rpartition("\n")
    return int(status), (json.loads(text) if text.strip() else None)


def _wait(what, probe, timeout=15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if probe():
            return
        time.sleep(0.1)
    pytest.fail(f"{what} within {timeout} s")


@pytest.mark.parametrize("mode", ["client-side", "server-side", "created"])
def test_drop_in_applies_over_an_installation(plane, upstream, rendered, mode):
    """`kubectl apply -k deploy/argocd-server` over argocd-server's objects of Argo CD's
    install.yaml, applied the same way before (client-side, as Argo CD's getting started does, or
    --server-side): the Deployment is tiphys's alone, none of upstream's container, environment,
    volumes or probes left, and the selector is what it was. Over a Deployment made without a
    record of what was applied ("created": kubectl create, as other tools make it), the one
    container is still replaced in place, since it has upstream's name; upstream's variables and
    volumes stay beside tiphys's, unused."""
    side = ["--server-side"] if mode == "server-side" else []
    ours = only(rendered[DROP_IN], "Deployment")
    theirs = [json.loads(json.dumps(upstream[(kind, UPSTREAM_NAME)])) for kind in (*UPSTREAM_SAME, "Deployment")]
    plane.kubectl("delete", "deployment", UPSTREAM_NAME, "-n", NAMESPACE, "--ignore-not-found", "--wait=true")
    try:
        if mode == "created":
            plane.kubectl("apply", "-n", NAMESPACE, "-f", "-", input=_as_list(theirs[:-1]), part="upstream's objects")
            plane.kubectl("create", "-n", NAMESPACE, "-f", "-", input=_as_list(theirs[-1:]), part="upstream's objects")
        else:
            plane.kubectl("apply", "-n", NAMESPACE, *side, "-f", "-", input=_as_list(theirs), part="upstream's objects")
        before = plane.get_json("deployment", UPSTREAM_NAME, "-n", NAMESPACE)
        assert before["spec"]["template"]["spec"]["containers"][0]["args"] == ["/usr/local/bin/argocd-server"]

        plane.kubectl("apply", "-n", NAMESPACE, *side, "-k", str(DEPLOY / DROP_IN), part="kubectl apply -k")
        live = plane.get_json("deployment", UPSTREAM_NAME, "-n", NAMESPACE)
        assert live["spec"]["selector"] == before["spec"]["selector"] == ours["spec"]["selector"]
        assert live["metadata"]["generation"] > before["metadata"]["generation"]
        tpl, want = live["spec"]["template"], ours["spec"]["template"]
        pod, want_pod = tpl["spec"], want["spec"]
        [c] = pod["containers"]
        [want_c] = want_pod["containers"]
        assert (c["name"], c["image"], c["args"]) == (want_c["name"], want_c["image"], want_c["args"])
        assert pod["serviceAccountName"] == UPSTREAM_NAME
        assert pod["automountServiceAccountToken"] is True
        assert c["securityContext"] == want_c["securityContext"]
        env = [e["name"] for e in c["env"]]
        mounts = [(m["name"], m["mountPath"]) for m in c["volumeMounts"]]
        want_env = [e["name"] for e in want_c["env"]]
        want_mounts = [(m["name"], m["mountPath"]) for m in want_c["volumeMounts"]]
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert c[probe]["httpGet"]["path"] == "/healthz", probe
            assert c[probe]["periodSeconds"] == want_c[probe]["periodSeconds"], probe
        if mode == "created":
            assert set(want_env) <= set(env) and set(want_mounts) <= set(mounts)
            return
        assert tpl["metadata"]["labels"] == want["metadata"]["labels"]
        assert pod["affinity"] == want_pod["affinity"], "upstream's second affinity term is left"
        assert sorted(v["name"] for v in pod["volumes"]) == sorted(v["name"] for v in want_pod["volumes"])
        assert env == want_env, "upstream's environment is left"
        assert mounts == want_mounts
        assert [(p.get("name"), p["containerPort"]) for p in c["ports"]] == \
            [(p["name"], p["containerPort"]) for p in want_c["ports"]]
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert "initialDelaySeconds" not in c[probe], f"{probe}: upstream's initialDelaySeconds is left"
        for kind in ("Role", "ClusterRole"):
            got = plane.get_json(kind.lower(), UPSTREAM_NAME, *(["-n", NAMESPACE] if kind == "Role" else []))
            assert got["rules"] == upstream[(kind, UPSTREAM_NAME)]["rules"], kind
        svc = plane.get_json("service", UPSTREAM_NAME, "-n", NAMESPACE)["spec"]
        assert [(p["name"], p["port"], p["targetPort"]) for p in svc["ports"]] == \
            [("http", 80, 8080), ("https", 443, 8080)]
    finally:
        # No kubelet runs the pods here; the objects of the ServiceAccount stay for the tests below.
        plane.kubectl("delete", "deployment", UPSTREAM_NAME, "-n", NAMESPACE, "--ignore-not-found")


@pytest.fixture(scope="module")
def pod_identity(controlplane, rendered, tmp_path_factory):
    """What a pod of the Deployment gets from the kubelet, made on the real API server: the
    ServiceAccount argocd-server with the overlay's Role and ClusterRole (Argo CD's), a token of
    it, and the in-cluster configuration kube-rs reads (KUBERNETES_SERVICE_HOST/PORT and the files
    of /var/run/secrets/kubernetes.io/serviceaccount, here in a mount namespace of the process's
    own, as controlplane.py gives Argo CD's processes). Where no mount namespace can be made, a
    kubeconfig of the same token. Returns (wrapper, env, extra args)."""
    plane = controlplane
    objs = [o for o in rendered[DROP_IN] if o["kind"] != "Deployment"]
    plane.kubectl("apply", "-n", NAMESPACE, "-f", "-", input=_as_list(objs), part="argocd-server's RBAC")
    token = plane.kubectl("create", "token", UPSTREAM_NAME, "-n", NAMESPACE, "--duration", "2h").strip()
    d = tmp_path_factory.mktemp("serviceaccount")
    host, port = "127.0.0.1", str(plane.state["apiserver"]["port"])
    if plane.state.get("in_cluster"):
        (d / "token").write_text(token)
        (d / "namespace").write_text(NAMESPACE)
        shutil.copy(plane.state["pki"]["ca"], d / "ca.crt")
        script = ("set -e; mount -t tmpfs -o mode=0755 tmpfs /run; "
                  "s=/run/secrets/kubernetes.io/serviceaccount; mkdir -p $s; "
                  f"cp {d}/token {d}/ca.crt {d}/namespace $s/; exec \"$@\"")
        wrapper = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "in-cluster"]
        return wrapper, {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port}, []
    kubeconfig = d / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "pod",
        "clusters": [{"name": "c", "cluster": {"server": f"https://{host}:{port}",
                                               "certificate-authority": plane.state["pki"]["ca"]}}],
        "users": [{"name": "argocd-server", "user": {"token": token}}],
        "contexts": [{"name": "pod", "context": {"cluster": "c", "user": "argocd-server", "namespace": NAMESPACE}}]}))
    return [], {}, [f"--kubeconfig={kubeconfig}"]


def _drop_in_pod(plane, rendered, pods, root, pod_identity, params=None):
    wrapper, env, extra = pod_identity
    if params is None:
        params = plane.get_json("configmap", "argocd-cmd-params-cm", "-n", NAMESPACE).get("data") or {}
    # No repository is contacted (there is no network here).
    pod = pods(rendered[DROP_IN], root, config_maps={"argocd-cmd-params-cm": params}, wrapper=wrapper,
               extra_env={**env, "HOME": str(root), "TIPHYS_REPO_ACCESS": "off"}, extra_args=extra)
    pod.env.pop("KUBECONFIG", None)  # kube-rs would prefer it to the in-cluster configuration
    return pod


def test_drop_in_args_run_as_the_pod(plane, rendered, pods, tmp_path, pod_identity):
    """The container's arguments, with only what the pod has: the ServiceAccount argocd-server
    (Argo CD's RBAC) and the namespace; the installation's argocd-cm, argocd-rbac-cm and
    argocd-secret come from the API server. Its admin password works, projects made with kubectl
    are served, one made through tiphys is the custom resource, and the drain is clean."""
    pod = _drop_in_pod(plane, rendered, pods, tmp_path, pod_identity)
    if plane.state.get("in_cluster"):  # nothing but the in-cluster configuration to go by
        assert not any(a.startswith("--kubeconfig") for a in pod.args) and "KUBECONFIG" not in pod.env
    pod.start()
    assert pod.healthz() == ["ok", "200"], pod.log()
    url = f"https://127.0.0.1:{pod.port}"
    token = _rest_login(url, plane.state["argocd"]["admin_password"], "-k").get("token")
    assert token, pod.log()

    # Projects rather than applications: the controller reconciles neither, so the installation's
    # other tests find it as it was.
    status, apps = _rest("GET", f"{url}/api/v1/applications", token)
    assert status == 200 and "items" in apps, apps

    def project(name):
        return {"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject",
                "metadata": {"name": name, "namespace": NAMESPACE},
                "spec": {"sourceRepos": ["https://git.example.com/drop-in.git"],
                         "destinations": [{"server": "https://kubernetes.default.svc", "namespace": "drop-in"}]}}

    suffix = os.urandom(3).hex()
    by_kubectl, by_tiphys = f"drop-in-kubectl-{suffix}", f"drop-in-tiphys-{suffix}"
    plane.apply([project(by_kubectl)])
    _wait("the project made with kubectl served by tiphys",
          lambda: _rest("GET", f"{url}/api/v1/projects/{by_kubectl}", token)[0] == 200)
    body = project(by_tiphys)
    del body["apiVersion"], body["kind"], body["metadata"]["namespace"]
    status, made = _rest("POST", f"{url}/api/v1/projects", token, {"project": body})
    assert status == 200, (made, pod.log())
    stored = plane.get_json("appproject", by_tiphys, "-n", NAMESPACE)
    assert stored["spec"] == body["spec"], stored
    assert stored["metadata"]["uid"] == made["metadata"]["uid"]
    for name in (by_kubectl, by_tiphys):
        status, answer = _rest("DELETE", f"{url}/api/v1/projects/{name}", token)
        assert status == 200, answer
    _wait("both projects gone from the API server", lambda: plane.kubectl(
        "get", "appprojects", by_kubectl, by_tiphys, "-n", NAMESPACE, "--ignore-not-found").strip() == "")
    pod.drain()


# The keys of argocd-cmd-params-cm the Deployment maps (upstream's names and values).
PARAM_KEYS = ("server.insecure", "server.basehref", "server.rootpath", "server.log.format", "server.log.level",
              "server.x.frame.options", "server.content.security.policy", "server.tls.minversion",
              "server.tls.maxversion", "server.tls.ciphers", "application.namespaces")


def test_drop_in_takes_argocd_cmd_params_cm_as_upstream_writes_it(plane, rendered, pods, tmp_path, pod_identity):
    """argocd-cmd-params-cm with the values of Argo CD's own example of it (its
    docs/operator-manual/argocd-cmd-params-cm.yaml) starts tiphys; with server.insecure and
    server.rootpath set it serves plaintext under the root path, /healthz (the probes) at the root."""
    c = container(rendered[DROP_IN])
    mapped = sorted(e["valueFrom"]["configMapKeyRef"]["key"] for e in c["env"]
                    if "configMapKeyRef" in e.get("valueFrom", {}))
    assert mapped == sorted(PARAM_KEYS)
    from controlplane import argocd_module_dir  # noqa: PLC0415
    example = yaml.safe_load((argocd_module_dir() / "docs" / "operator-manual" / "argocd-cmd-params-cm.yaml")
                             .read_text())["data"]
    values = {k: str(example[k]) for k in PARAM_KEYS if k in example}
    assert {"server.insecure", "server.rootpath", "server.log.format", "server.tls.ciphers"} <= set(values), values
    pod = _drop_in_pod(plane, rendered, pods, tmp_path / "example", pod_identity, params=values).start()
    assert pod.healthz() == ["ok", "200"], pod.log()
    assert values["server.insecure"] == "false"
    res = subprocess.run(["curl", "-sS", "-k", "--max-time", "10", "-o", "/dev/null", "-w", "%{http_code}",
                          f"https://127.0.0.1:{pod.port}/api/version"], capture_output=True, text=True, timeout=30)
    assert (res.returncode, res.stdout) == (0, "200"), (res.stderr, pod.log())  # TLS, as upstream with "false"
    pod.drain()

    values = {**values, "server.insecure": "true", "server.rootpath": "/argocd", "server.log.format": "json"}
    pod = _drop_in_pod(plane, rendered, pods, tmp_path / "insecure", pod_identity, params=values).start()
    assert pod.healthz() == ["ok", "200"], pod.log()
    res = subprocess.run(["curl", "-sS", "--max-time", "10", "-w", "\n%{http_code}",
                          f"http://127.0.0.1:{pod.port}/argocd/api/version"],
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    body, _, status = res.stdout.rpartition("\n")
    assert status == "200" and "Version" in json.loads(body), res.stdout
    first = (pod.root / "server.log").read_text().splitlines()[0]
    assert json.loads(first), first  # server.log.format: json
    pod.drain()
