"""deploy/compose and deploy/kubernetes checked beyond their schemas: what
one file names, another must provide.

The schemas themselves are checked by their tools in deploy_config_test.sh
(check-jsonschema with the Compose specification, kubernetes-validate with
Kubernetes' own); this script adds the cross-references a schema cannot see:
every file a compose service mounts exists, Prometheus and Grafana point at
the services that exist, the Deployment mounts what it declares and probes
a port it opens, the Service selects the Deployment's pods, and the
ServiceMonitor (a Prometheus Operator resource, whose schema is not on
PyPI) selects the Service, names its port, and has its selector and
metadata checked against Kubernetes' own LabelSelector and ObjectMeta.

    manifests_check.py SOURCE_DIR
"""

import json
import os
import sys
from importlib import resources

import jsonschema
import kubernetes_validate
import yaml

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)


def compose(src):
    root = os.path.join(src, "deploy", "compose")
    spec = yaml.safe_load(open(os.path.join(root, "compose.yaml")))
    services = spec["services"]
    check(set(services) == {"tailord", "prometheus", "grafana"}, f"compose services: {sorted(services)}")
    for name, service in services.items():
        check(str(service.get("image", "")).count(":") >= 1, f"compose {name}: the image has no tag")
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                check(os.path.exists(os.path.join(root, source)), f"compose {name} mounts {source}, which is missing")
            else:
                check(source in spec.get("volumes", {}), f"compose {name}: volume {source} is not declared")
        for port in service.get("ports", []):
            check(str(port).startswith("127.0.0.1:"), f"compose {name} publishes {port} beyond loopback")

    # Prometheus scrapes the tailord service by its name and port, and the
    # image's settings accept that name as Host.
    prometheus = yaml.safe_load(open(os.path.join(root, "prometheus.yml")))
    targets = [t for job in prometheus["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]]
    check(targets == ["tailord:8470"], f"compose Prometheus scrapes {targets}")
    check([j["job_name"] for j in prometheus["scrape_configs"]] == ["tailord"], "the scrape job is not `tailord`")
    image_settings = yaml.safe_load(open(os.path.join(src, "deploy", "container", "tailord.yaml")))
    check("tailord" in str(image_settings.get("allowed_hosts", "")).split(","),
          "the image's tailord.yaml does not allow the compose service's name")
    check(str(image_settings["listen"]).endswith(":8470"), "the image's tailord does not listen on 8470")
    mounted = {v.split(":")[1]: v.split(":")[0] for v in services["prometheus"]["volumes"]}
    check(mounted.get("/etc/prometheus/alerts.yml") == "../prometheus/alerts.yml",
          "compose Prometheus does not mount deploy/prometheus/alerts.yml beside its config")

    datasource = yaml.safe_load(open(os.path.join(root, "grafana-datasource.yaml")))["datasources"][0]
    check(datasource["url"] == "http://prometheus:9090", f"compose Grafana's data source is {datasource['url']}")
    provider = yaml.safe_load(open(os.path.join(src, "deploy", "grafana", "provisioning", "dashboards", "tailor.yaml")))
    grafana_mounts = {v.split(":")[1]: v.split(":")[0] for v in services["grafana"]["volumes"]}
    check(grafana_mounts.get(provider["providers"][0]["options"]["path"]) == "../grafana/dashboards",
          "compose Grafana does not mount the dashboards where the provider reads them")


def load_all(path):
    return [d for d in yaml.safe_load_all(open(path)) if d]


def k8s_definitions():
    version = kubernetes_validate.utils.latest_version()
    ref = resources.files("kubernetes_validate").joinpath(
        f"kubernetes-json-schema/v{version}-local-strict/_definitions.json")
    return json.loads(ref.read_text())


def validate_as(definitions, name, value, what):
    # The strict definitions refuse keys they do not know, as --strict does.
    schema = {"$ref": f"#/$defs/{name}", "$defs": definitions["$defs"]}
    try:
        jsonschema.Draft202012Validator(schema).validate(value)
    except jsonschema.ValidationError as e:
        failures.append(f"{what}: {'.'.join(str(p) for p in e.path)}: {e.message}")


def kubernetes(src):
    root = os.path.join(src, "deploy", "kubernetes")
    docs = {}
    for name in sorted(os.listdir(root)):
        if name.endswith(".yaml") and name != "kustomization.yaml":
            for d in load_all(os.path.join(root, name)):
                docs[(d["kind"], d["metadata"]["name"])] = d
    deployment = docs[("Deployment", "tailord")]
    service = docs[("Service", "tailord")]
    monitor = docs[("ServiceMonitor", "tailord")]
    config = docs[("ConfigMap", "tailord-config")]
    pod = deployment["spec"]["template"]
    labels = pod["metadata"]["labels"]
    check(all(labels.get(k) == v for k, v in deployment["spec"]["selector"]["matchLabels"].items()),
          "the Deployment's selector does not match its pods")
    check(deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"]["type"] == "Recreate",
          "two tailord pods could share the store: one replica, Recreate")
    container = pod["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        get = container[probe]["httpGet"]
        check(get["path"] == "/healthz" and get["port"] in ports, f"the {probe} does not ask /healthz on a port opened")
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    for mount in container["volumeMounts"]:
        check(mount["name"] in volumes, f"the Deployment mounts volume {mount['name']}, which it does not declare")
    for volume in volumes.values():
        if "persistentVolumeClaim" in volume:
            claim = volume["persistentVolumeClaim"]["claimName"]
            check(("PersistentVolumeClaim", claim) in docs, f"the claim {claim} is not in deploy/kubernetes")
        if "configMap" in volume:
            check(("ConfigMap", volume["configMap"]["name"]) in docs, "the ConfigMap is not in deploy/kubernetes")
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    settings = yaml.safe_load(config["data"]["tailord.yaml"])
    check(mounts.get(settings["data_dir"]) == "data", "tailord's data_dir is not the data volume")
    check(mounts.get(settings["spec_root"]) == "specs", "tailord's spec_root is not the specs volume")
    check(container["args"] == ["--config", "/etc/tailor/tailord.yaml"] and mounts.get("/etc/tailor") == "config",
          "tailord is not started with the ConfigMap's settings")
    check(str(settings["listen"]).startswith("0.0.0.0:") and int(settings["listen"].split(":")[1]) in ports.values(),
          "tailord does not listen on the port the pod opens")
    security = container["securityContext"]
    check(security.get("readOnlyRootFilesystem") and security.get("allowPrivilegeEscalation") is False
          and security["capabilities"]["drop"] == ["ALL"], "the container is not hardened")
    check(mounts.get("/tmp") == "tmp", "a read-only root needs a writable /tmp")
    check(pod["spec"]["securityContext"]["runAsUser"] == 10001, "the pod does not run as the image's user tailor")

    check(all(labels.get(k) == v for k, v in service["spec"]["selector"].items()),
          "the Service does not select the Deployment's pods")
    service_ports = {p["name"]: p for p in service["spec"]["ports"]}
    check(all(p["targetPort"] in ports for p in service_ports.values()), "a Service port targets no container port")
    check(f"{service['metadata']['name']}" in str(settings.get("allowed_hosts", "")).split(","),
          "tailord does not accept the Service's name as Host")

    definitions = k8s_definitions()
    validate_as(definitions, "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", monitor["metadata"],
                "ServiceMonitor metadata")
    validate_as(definitions, "io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector", monitor["spec"]["selector"],
                "ServiceMonitor selector")
    check(set(monitor["spec"]) <= {"jobLabel", "selector", "endpoints", "namespaceSelector"},
          f"ServiceMonitor spec keys {sorted(monitor['spec'])}")
    check(all(service["metadata"]["labels"].get(k) == v for k, v in monitor["spec"]["selector"].get("matchLabels", {"": None}).items()),
          "the ServiceMonitor does not select the Service")
    check(service["metadata"]["labels"].get(monitor["spec"]["jobLabel"]) == "tailord",
          "the ServiceMonitor's job label is not `tailord`, which the alerts and dashboards select")
    for endpoint in monitor["spec"]["endpoints"]:
        check(set(endpoint) <= {"port", "path", "interval", "scrapeTimeout", "scheme"}, f"endpoint keys {sorted(endpoint)}")
        check(endpoint["port"] in service_ports and endpoint["path"] == "/metrics",
              f"the ServiceMonitor scrapes {endpoint['port']}{endpoint['path']}, not the Service's /metrics")

    kustomization = yaml.safe_load(open(os.path.join(root, "kustomization.yaml")))
    listed = sorted(kustomization["resources"])
    present = sorted(n for n in os.listdir(root) if n.endswith(".yaml") and n != "kustomization.yaml")
    check(listed == present, f"kustomization.yaml lists {listed}, the folder holds {present}")
    namespace = docs.get(("Namespace", kustomization.get("namespace")))
    check(namespace is not None, "the kustomization's namespace is not declared")
    check(f"tailord.{kustomization.get('namespace')}.svc" in str(settings.get("allowed_hosts", "")).split(","),
          "tailord does not accept the Service's in-cluster name as Host")


def main():
    src = sys.argv[1]
    compose(src)
    kubernetes(src)
    for f in failures:
        print(f"FAIL: {f}", file=sys.stderr)
    if failures:
        sys.exit(1)
    print("compose and kubernetes cross-references: ok")


if __name__ == "__main__":
    main()
