//! Credentials (seed 000 "首次运行的配置流程"): the lookup chain, `.env` files, `setup`, and the
//! probe.
