#!/usr/bin/env python3
"""A CycloneDX 1.5 SBOM of the crates compiled into the lifeguard binary.

Reads `cargo metadata` (its resolve, for one target platform) and walks the
dependency graph from the lifeguard package along normal dependencies only (build
scripts and dev-dependencies are not linked into the binary), so the list is what a
scanner should match advisories against. Prints the JSON on stdout.

    scripts/sbom.py METADATA.json VERSION
"""
import json
import sys
import uuid


def main():
    metadata = json.load(open(sys.argv[1]))
    version = sys.argv[2]
    packages = {p["id"]: p for p in metadata["packages"]}
    nodes = {n["id"]: n for n in metadata["resolve"]["nodes"]}
    root = next(p["id"] for p in metadata["packages"] if p["name"] == "lifeguard")
    linked, frontier = set(), [root]
    while frontier:
        node = nodes[frontier.pop()]
        for dep in node.get("deps", []):
            normal = any(k.get("kind") is None for k in dep.get("dep_kinds", []))
            if normal and dep["pkg"] not in linked:
                linked.add(dep["pkg"])
                frontier.append(dep["pkg"])
    components = []
    for pid in sorted(linked, key=lambda i: (packages[i]["name"], packages[i]["version"])):
        p = packages[pid]
        component = {
            "type": "library",
            "bom-ref": f"pkg:cargo/{p['name']}@{p['version']}",
            "name": p["name"],
            "version": p["version"],
            "purl": f"pkg:cargo/{p['name']}@{p['version']}",
        }
        if p.get("license"):
            component["licenses"] = [{"expression": p["license"]}]
        components.append(component)
    bom = {
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "serialNumber": f"urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, 'lifeguard@' + version)}",
        "version": 1,
        "metadata": {
            "component": {
                "type": "application",
                "bom-ref": f"pkg:cargo/lifeguard@{version}",
                "name": "lifeguard",
                "version": version,
                "purl": f"pkg:cargo/lifeguard@{version}",
                "licenses": [{"expression": "MIT OR Apache-2.0"}],
            }
        },
        "components": components,
        "dependencies": [
            {
                "ref": f"pkg:cargo/{packages[i]['name']}@{packages[i]['version']}",
                "dependsOn": sorted(
                    f"pkg:cargo/{packages[d['pkg']]['name']}@{packages[d['pkg']]['version']}"
                    for d in nodes[i].get("deps", [])
                    if d["pkg"] in linked
                    and any(k.get("kind") is None for k in d.get("dep_kinds", []))
                ),
            }
            for i in [root] + sorted(linked)
        ],
    }
    json.dump(bom, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
