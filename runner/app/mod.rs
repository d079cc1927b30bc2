//! The application layer between the command line and the library: it builds the services of
//! one run ([`RunContext`]: provider, session store, sandboxes, workbench, manifest, runtime)
//! from the validated options and credentials, and implements `once`. The `go`/`run` drivers
//! (workflows) and the terminal console use the same builder.

pub mod context;
pub mod once;
pub mod print;

pub use context::{RunContext, RunSetup};
pub use print::PlainPrinter;
