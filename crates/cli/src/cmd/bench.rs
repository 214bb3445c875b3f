pub fn run(_b: BenchCommand) -> anyhow::Result<()> {
    Ok(())
}
#[derive(clap::Subcommand)]
pub enum BenchCommand {
    Io,
}
