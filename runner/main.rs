//! The `flowerbox` binary: flower's command line with every agent in its own container.
//! Everything happens in [`flowerbox::cli::main_entry`]; `cargo run -- ARGS` is `flowerbox ARGS`.

fn main() {
    // Inside an agent's container: the exec service (hidden; see sandbox::service).
    if std::env::args_os().nth(1).as_deref()
        == Some(std::ffi::OsStr::new(
            flowerbox::sandbox::service::SUBCOMMAND,
        ))
    {
        std::process::exit(flowerbox::sandbox::service::serve());
    }
    std::process::exit(flowerbox::cli::main_entry());
}
