//! flower's command line (seed 000): default-subcommand rewriting, the parser, start prompts and
//! exit codes.
