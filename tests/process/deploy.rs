//! The manifests under deploy/ parse, and say what they claim: the sidecar
//! as a native sidecar container with its probes and a configuration it
//! accepts; the compose file with Jaeger, the sidecar and the agent.

use std::path::{Path, PathBuf};

use lmos_sidecar::Config;
use yaml_rust2::{Yaml, YamlLoader};

fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            yaml_files(&path, out);
        } else if matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml")
        ) {
            out.push(path);
        }
    }
}

fn load(path: &Path) -> Vec<Yaml> {
    let text = std::fs::read_to_string(path).unwrap();
    YamlLoader::load_from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy")
}

#[test]
fn every_yaml_file_under_deploy_parses() {
    let mut files = Vec::new();
    yaml_files(&deploy(), &mut files);
    assert!(files.len() >= 2, "{files:?}");
    for f in files {
        assert!(!load(&f).is_empty(), "{} is empty", f.display());
    }
}

#[test]
fn the_kubernetes_example_runs_the_sidecar_as_a_native_sidecar() {
    let docs = load(&deploy().join("kubernetes/weather-agent.yaml"));
    let deployment = docs
        .iter()
        .find(|d| d["kind"].as_str() == Some("Deployment"))
        .unwrap();
    let pod = &deployment["spec"]["template"]["spec"];
    let sidecar = &pod["initContainers"][0];
    assert_eq!(sidecar["restartPolicy"].as_str(), Some("Always"));
    assert_eq!(
        sidecar["livenessProbe"]["httpGet"]["path"].as_str(),
        Some("/healthz")
    );
    assert_eq!(
        sidecar["readinessProbe"]["httpGet"]["path"].as_str(),
        Some("/readyz")
    );
    // The demo agent is in the sidecar's own image and binary.
    let agent = &pod["containers"][0]["command"];
    assert_eq!(agent[0].as_str(), Some("lmos-sidecar"));
    assert_eq!(agent[1].as_str(), Some("demo-agent"));

    // The configuration in the ConfigMap is one the sidecar accepts.
    let map = docs
        .iter()
        .find(|d| d["kind"].as_str() == Some("ConfigMap"))
        .unwrap();
    let toml_text = map["data"]["lmos-sidecar.toml"].as_str().unwrap();
    let config: Config = toml::from_str(toml_text).unwrap();
    config.validate().unwrap();
    assert_eq!(config.http.listen.to_string(), "0.0.0.0:8080");
    // Listening beyond the pod, it requires credentials, whose variables
    // the sidecar container gets from the Secret.
    assert!(config.mqtt.authentication && !config.http.authentication.is_empty());
    let env = &sidecar["env"];
    for principal in &config.auth.principals {
        let var = principal.token_env.as_str();
        let from_secret = (0..)
            .map_while(|i| env[i].as_hash().map(|_| &env[i]))
            .any(|e| {
                e["name"].as_str() == Some(var)
                    && e["valueFrom"]["secretKeyRef"]["name"].as_str()
                        == Some("lmos-sidecar-tokens")
            });
        assert!(from_secret, "{var} comes from the Secret");
    }
}

#[test]
fn the_compose_file_runs_jaeger_the_sidecar_and_the_agent() {
    let docs = load(&deploy().join("compose.yaml"));
    let services = &docs[0]["services"];
    for name in ["jaeger", "sidecar", "weather-agent"] {
        assert!(!services[name].is_badvalue(), "no service {name}");
    }
    assert!(services["jaeger"]["image"]
        .as_str()
        .unwrap()
        .starts_with("jaegertracing/jaeger:2"));
    let env = &services["sidecar"]["environment"];
    assert_eq!(
        env["OTEL_EXPORTER_OTLP_ENDPOINT"].as_str(),
        Some("http://jaeger:4317")
    );
}
