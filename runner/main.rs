//! The `flowerbox` binary: flower's command line with every agent in its own container.
//! Everything happens in [`flowerbox::cli::main_entry`]; `cargo run -- ARGS` is `flowerbox ARGS`.

fn main() {
    std::process::exit(flowerbox::cli::main_entry());
}
