//! The `flowerbox` binary: flower's command line with every agent in its own container.
//! Everything happens in [`flowerbox::cli::main_entry`]; `cargo run -- ARGS` is `flowerbox ARGS`.

fn main() {
    // Inside an agent's container: the exec service (hidden; see sandbox::service).
    if std::env::args_os().nth(1).as_deref()
        == Some(std::ffi::OsStr::new(
            flowerbox::sandbox::service::SUBCOMMAND,
        ))
    {
        let args: Vec<std::ffi::OsString> = std::env::args_os().skip(2).collect();
        std::process::exit(flowerbox::sandbox::service::serve(&args));
    }
    // A command's exec without the service: a Landlock domain first (service::domain).
    if std::env::args_os().nth(1).as_deref()
        == Some(std::ffi::OsStr::new(
            flowerbox::sandbox::service::domain::ENTER_SUBCOMMAND,
        ))
    {
        std::process::exit(flowerbox::sandbox::service::domain::enter_and_exec(
            std::env::args_os().skip(2).collect(),
        ));
    }
    // A run's end left the removal of its containers to this process (sandbox::docker::reap).
    if std::env::args_os().nth(1).as_deref()
        == Some(std::ffi::OsStr::new(
            flowerbox::cli::services::CLEANUP_SUBCOMMAND,
        ))
    {
        std::process::exit(flowerbox::cli::cleanup::main());
    }
    std::process::exit(flowerbox::cli::main_entry());
}
