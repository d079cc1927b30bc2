//! Figure 10e of `cli_bench`: what the engine alone costs for the containers of figure 10, with
//! no flowerbox in the way. A pod (the agent image, `--init`, `sleep infinity`, shareable IPC,
//! started untimed) and then, timed, `n` containers shaped like agents joining it (its network,
//! PID and IPC namespaces; `sleep infinity` as uid 4242; a tmpfs home), all at once, each:
//! create, start, one exec (`true`, attached, to its end: the exec service's start is one such
//! exec per container), and a `SIGKILL` through the engine (which answers once the container is
//! dead: the run's end does the same). The difference between `n = 8` and `n = 1` is the floor
//! under figure 10's difference: what eight containers cost the engine over one, before any
//! model turn, session or tool of flowerbox's.

use bollard::models::{ContainerCreateBody, ExecConfig, HostConfig};
use bollard::query_parameters::{
    CreateContainerOptions, KillContainerOptions, RemoveContainerOptions,
};
use bollard::Docker;
use futures::StreamExt;
use std::collections::HashMap;
use std::time::Instant;

/// The label every container of this figure carries (removed by it, whatever happened).
const LABEL: &str = "flowerbox.bench-floor";

/// Creates a container of this figure named `name`: `sleep infinity` from `image` as `user`,
/// with `host` (not started). Its id.
async fn create(docker: &Docker, image: &str, name: &str, user: &str, host: HostConfig) -> String {
    let body = ContainerCreateBody {
        image: Some(image.into()),
        entrypoint: Some(vec!["sleep".into(), "infinity".into()]),
        cmd: Some(vec![]),
        user: Some(user.into()),
        labels: Some(HashMap::from([(LABEL.to_string(), "1".to_string())])),
        host_config: Some(host),
        ..Default::default()
    };
    let opts = CreateContainerOptions {
        name: Some(name.into()),
        ..Default::default()
    };
    docker
        .create_container(Some(opts), body)
        .await
        .expect("create")
        .id
}

/// One container's whole life as figure 10 gives it: create, start, one exec, kill.
async fn member(docker: &Docker, image: &str, pod: &str, name: &str) {
    let joined = format!("container:{pod}");
    let host = HostConfig {
        network_mode: Some(joined.clone()),
        pid_mode: Some(joined.clone()),
        ipc_mode: Some(joined),
        tmpfs: Some(HashMap::from([(
            "/home/agent".to_string(),
            "rw,nosuid,nodev,size=64m,uid=4242,gid=4242".to_string(),
        )])),
        cap_drop: Some(vec!["ALL".into()]),
        security_opt: Some(vec!["no-new-privileges".into()]),
        ..Default::default()
    };
    let id = create(docker, image, name, "4242:4242", host).await;
    docker.start_container(&id, None).await.expect("start");
    let exec = docker
        .create_exec(
            &id,
            ExecConfig {
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                cmd: Some(vec!["true".into()]),
                ..Default::default()
            },
        )
        .await
        .expect("exec")
        .id;
    if let bollard::exec::StartExecResults::Attached { mut output, .. } =
        docker.start_exec(&exec, None).await.expect("exec start")
    {
        while output.next().await.is_some() {}
    }
    let kill = KillContainerOptions {
        signal: "SIGKILL".into(),
    };
    docker.kill_container(&id, Some(kill)).await.expect("kill");
}

/// Removes every container of this figure (the pod last, as the engine wants).
async fn remove_all(docker: &Docker, pod: &str) {
    use bollard::query_parameters::ListContainersOptions;
    let filters = HashMap::from([("label".to_string(), vec![LABEL.to_string()])]);
    let list = docker
        .list_containers(Some(ListContainersOptions {
            all: true,
            filters: Some(filters),
            ..Default::default()
        }))
        .await
        .unwrap_or_default();
    let force = || {
        Some(RemoveContainerOptions {
            force: true,
            ..Default::default()
        })
    };
    let members = list
        .iter()
        .filter_map(|c| c.id.as_deref())
        .filter(|id| *id != pod);
    futures::future::join_all(members.map(|id| docker.remove_container(id, force()))).await;
    let _ = docker.remove_container(pod, force()).await;
}

/// One sample: the ms `n` agent-shaped containers take at once in a fresh pod (module doc).
pub async fn sample(docker: &Docker, image: &str, n: usize) -> f64 {
    let tag = format!("fbx-floor-{}-{n}", std::process::id());
    let host = HostConfig {
        init: Some(true),
        ipc_mode: Some("shareable".into()),
        network_mode: Some("none".into()),
        ..Default::default()
    };
    let pod = create(docker, image, &format!("{tag}-pod"), "65530:65530", host).await;
    docker.start_container(&pod, None).await.expect("pod start");
    let started = Instant::now();
    let names: Vec<String> = (1..=n).map(|k| format!("{tag}-m{k}")).collect();
    futures::future::join_all(names.iter().map(|name| member(docker, image, &pod, name))).await;
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    remove_all(docker, &pod).await;
    ms
}
