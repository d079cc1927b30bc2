use super::*;

fn lookup(name: &str) -> Option<String> {
    match name {
        "DOCS_TOKEN" => Some("tok-123".into()),
        "ANTHROPIC_API_KEY" => Some("sk-ant-secret".into()),
        "HOME" => Some("/home/u".into()),
        _ => None,
    }
}

type Lookup = &'static dyn Fn(&str) -> Option<String>;

fn env_with(allow: &[&str]) -> (Vec<String>, Lookup) {
    (allow.iter().map(|s| s.to_string()).collect(), &lookup)
}

/// [`parse`], its problems as the text shown.
fn parse_str(text: &str, allow: &[&str]) -> Result<(Vec<ServerConfig>, Vec<String>), FileError> {
    let (allow, look) = env_with(allow);
    let (servers, problems) = parse(
        text,
        Path::new("/w/.mcp.json"),
        &EnvSource::new(&allow, look),
    )?;
    Ok((servers, problems.iter().map(ToString::to_string).collect()))
}

#[test]
fn claude_code_format_stdio_and_http() {
    let (servers, problems) = parse_str(
        r#"{"mcpServers": {
            "db": {"command": "python3", "args": ["db.py", "--ro"], "env": {"DB_PATH": "data.db"}},
            "docs": {"type": "http", "url": "https://docs.example.com/mcp",
                     "headers": {"Authorization": "Bearer ${DOCS_TOKEN}"}}
        }}"#,
        &["DOCS_TOKEN"],
    )
    .unwrap();
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(servers.len(), 2);
    assert_eq!(
        servers[0].transport,
        Transport::Stdio {
            command: "python3".into(),
            args: vec!["db.py".into(), "--ro".into()],
            env: vec![("DB_PATH".into(), "data.db".into())],
        }
    );
    assert_eq!(servers[0].id, "db");
    assert_eq!(
        servers[1].transport,
        Transport::Http {
            url: "https://docs.example.com/mcp".into(),
            headers: vec![("Authorization".into(), "Bearer tok-123".into())],
        }
    );
    assert_eq!(servers[0].describe(), "stdio: python3 db.py --ro");
}

#[test]
fn host_variables_are_expanded_only_when_named_and_never_credentials() {
    // Not named: the server is not started, and the warning says how to name it.
    let (servers, problems) = parse_str(
        r#"{"mcpServers": {"docs": {"url": "https://d.example/mcp", "headers": {"A": "${DOCS_TOKEN}"}}}}"#,
        &[],
    )
    .unwrap();
    assert!(servers.is_empty());
    assert!(problems[0].contains("--mcp-env DOCS_TOKEN"), "{problems:?}");
    // A credential stays out even when named.
    let (servers, problems) = parse_str(
        r#"{"mcpServers": {"x": {"command": "x", "env": {"K": "${ANTHROPIC_API_KEY}"}}}}"#,
        &["ANTHROPIC_API_KEY"],
    )
    .unwrap();
    assert!(servers.is_empty());
    assert!(problems[0].contains("凭证"), "{problems:?}");
    // Defaults apply when a variable is not passed.
    let (servers, _) = parse_str(
        r#"{"mcpServers": {"x": {"command": "x", "args": ["${HOME:-/tmp}", "${NOPE:-d}"]}}}"#,
        &[],
    )
    .unwrap();
    let Transport::Stdio { args, .. } = &servers[0].transport else {
        panic!()
    };
    assert_eq!(args, &["/tmp", "d"]);
    // Literal credentials by name are dropped; other literals pass.
    let (servers, problems) = parse_str(
        r#"{"mcpServers": {"x": {"command": "x", "env": {"OPENAI_API_KEY": "sk-1", "FLOWERBOX_EXEC": "m", "MODE": "ro"}}}}"#,
        &[],
    )
    .unwrap();
    let Transport::Stdio { env, .. } = &servers[0].transport else {
        panic!()
    };
    assert_eq!(env, &[("MODE".to_string(), "ro".to_string())]);
    assert_eq!(problems.len(), 2, "{problems:?}");
}

#[test]
fn bad_entries_are_named_and_the_rest_still_load() {
    let (servers, problems) = parse_str(
        r#"{"mcpServers": {
            "ok": {"command": "true"},
            "human": {"command": "x"},
            "old": {"type": "sse", "url": "https://x.example/sse"},
            "weird": {"type": "grpc"},
            "noargs": {"command": "x", "args": [1]},
            "file": {"url": "file:///etc/passwd"},
            "empty": {}
        }}"#,
        &[],
    )
    .unwrap();
    assert_eq!(
        servers.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
        ["ok"]
    );
    assert_eq!(problems.len(), 6, "{problems:?}");
    assert!(problems.iter().any(|p| p.contains("sse")));
    assert!(problems.iter().any(|p| p.contains("人机通道")));
    for bad in ["[]", "{}", r#"{"mcpServers": []}"#, "not json"] {
        assert!(parse_str(bad, &[]).is_err(), "{bad}");
    }
}

#[test]
fn project_file_problems_warn_and_mcp_config_problems_fail() {
    let ws = tempfile::tempdir().unwrap();
    let ws_path = ws.path().canonicalize().unwrap();
    std::fs::write(ws_path.join(PROJECT_FILE), "{broken").unwrap();
    let (allow, look) = env_with(&[]);
    let env = EnvSource::new(&allow, look);
    let c = load(&ws_path, &McpSettings::default(), &env).unwrap();
    assert!(c.servers.is_empty());
    assert!(
        c.warnings[0].contains("不是合法的 JSON"),
        "{:?}",
        c.warnings
    );

    // A symlinked .mcp.json is followed while it stays in the workspace (as the file tools
    // and the agent's container follow it), never out of it.
    let target = ws_path.join("real.json");
    std::fs::write(&target, r#"{"mcpServers": {"a": {"command": "x"}}}"#).unwrap();
    std::fs::remove_file(ws_path.join(PROJECT_FILE)).unwrap();
    std::os::unix::fs::symlink("real.json", ws_path.join(PROJECT_FILE)).unwrap();
    let c = load(&ws_path, &McpSettings::default(), &env).unwrap();
    assert_eq!(c.servers.len(), 1, "{c:?}");
    let outside = tempfile::tempdir().unwrap();
    let out_file = outside.path().join("evil.json");
    std::fs::write(&out_file, r#"{"mcpServers": {"evil": {"command": "x"}}}"#).unwrap();
    std::fs::remove_file(ws_path.join(PROJECT_FILE)).unwrap();
    std::os::unix::fs::symlink(&out_file, ws_path.join(PROJECT_FILE)).unwrap();
    let c = load(&ws_path, &McpSettings::default(), &env).unwrap();
    assert!(
        c.servers.is_empty() && c.warnings[0].contains("符号链接"),
        "{c:?}"
    );
    // A FIFO is refused at once (it used to be opened only `O_NONBLOCK`; now the one reader).
    std::fs::remove_file(ws_path.join(PROJECT_FILE)).unwrap();
    nix::unistd::mkfifo(&ws_path.join(PROJECT_FILE), nix::sys::stat::Mode::S_IRWXU).unwrap();
    let c = load(&ws_path, &McpSettings::default(), &env).unwrap();
    assert!(
        c.servers.is_empty() && c.warnings[0].contains("不是普通文件"),
        "{c:?}"
    );

    // --mcp-config: replaces same names, and any problem is an error.
    std::fs::remove_file(ws_path.join(PROJECT_FILE)).unwrap();
    std::fs::write(
        ws_path.join(PROJECT_FILE),
        r#"{"mcpServers": {"a": {"command": "x"}, "b": {"command": "y"}}}"#,
    )
    .unwrap();
    let extra = ws_path.join("extra.json");
    std::fs::write(&extra, r#"{"mcpServers": {"a": {"command": "z"}}}"#).unwrap();
    let settings = McpSettings {
        config_file: Some(extra.clone()),
        ..Default::default()
    };
    let c = load(&ws_path, &settings, &env).unwrap();
    let got: Vec<(&str, String)> = c
        .servers
        .iter()
        .map(|s| (s.name.as_str(), s.describe()))
        .collect();
    assert_eq!(got, [("b", "stdio: y".into()), ("a", "stdio: z".into())]);
    std::fs::write(
        &extra,
        r#"{"mcpServers": {"a": {"type": "sse", "url": "https://x.example"}}}"#,
    )
    .unwrap();
    let e = load(&ws_path, &settings, &env).unwrap_err();
    assert!(e.to_string().starts_with("--mcp-config "), "{e}");
    let missing = McpSettings {
        config_file: Some(ws_path.join("nope.json")),
        ..Default::default()
    };
    assert!(load(&ws_path, &missing, &env).is_err());
    // A --mcp-config in the workspace is read like .mcp.json: a link out of it is refused.
    std::os::unix::fs::symlink(&out_file, ws_path.join("linked.json")).unwrap();
    let linked = McpSettings {
        config_file: Some(ws_path.join("linked.json")),
        ..Default::default()
    };
    let e = load(&ws_path, &linked, &env).unwrap_err();
    assert!(e.to_string().contains("符号链接"), "{e}");
    // Elsewhere it is the user's own: a link is followed.
    let mine = outside.path().join("mine.json");
    std::os::unix::fs::symlink(&out_file, &mine).unwrap();
    let c = load(
        &ws_path,
        &McpSettings {
            config_file: Some(mine),
            ..Default::default()
        },
        &env,
    )
    .unwrap();
    assert!(c.servers.iter().any(|s| s.name == "evil"), "{c:?}");
}

#[test]
fn a_plugins_servers_join_the_projects_and_never_replace_one() {
    let ws = tempfile::tempdir().unwrap();
    let ws_path = ws.path().canonicalize().unwrap();
    std::fs::write(
        ws_path.join(PROJECT_FILE),
        r#"{"mcpServers": {"db": {"command": "project-db"}}}"#,
    )
    .unwrap();
    let plugin = ws_path.join(".flowerbox/plugins/p");
    std::fs::create_dir_all(&plugin).unwrap();
    std::fs::write(
        plugin.join(PROJECT_FILE),
        r#"{"mcpServers": {"db": {"command": "plugin-db"}, "docs": {"command": "plugin-docs"}}}"#,
    )
    .unwrap();
    let (allow, look) = env_with(&[]);
    let env = EnvSource::new(&allow, look);
    let settings = McpSettings {
        plugin_files: vec![plugin.join(PROJECT_FILE)],
        ..Default::default()
    };
    let c = load(&ws_path, &settings, &env).unwrap();
    let described: Vec<String> = c.servers.iter().map(ServerConfig::describe).collect();
    assert_eq!(described, ["stdio: project-db", "stdio: plugin-docs"]);
    assert!(c.warnings[0].contains("同名"), "{:?}", c.warnings);
    assert_eq!(c.servers[1].origin, plugin.join(PROJECT_FILE));
}
