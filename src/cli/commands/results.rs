//! `errand results list|download`: an execution's saved results, listed or streamed into a file.

use std::path::PathBuf;

use crate::cli::answers::Downloaded;
use crate::cli::output::{Format, OutputArgs, human_size, print_ok};
use crate::cli::show::{parse_result_name, print_results};
use crate::ops::Error;
use crate::ops::backend::{Backend, find};

/// `errand results ...`
#[derive(Debug, clap::Subcommand)]
pub enum ResultsAction {
    /// List the saved results with size and sha256.
    List {
        /// Execution name or unambiguous prefix.
        name: String,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Download one result into a file.
    Download {
        /// `input_workdir`, `output_workdir`, `output_artifacts`, `run_result`, `run_error` or `manifest.json`.
        result: String,
        /// Execution name or unambiguous prefix (`--job` is the same option).
        #[arg(long, visible_alias = "job")]
        execution: String,
        /// File to write; defaults to the result's name in the current directory.
        #[arg(short = 'o', long = "out")]
        file: Option<PathBuf>,
        /// Answer format.
        #[arg(long, value_enum, default_value_t = Format::Human)]
        format: Format,
    },
}

impl ResultsAction {
    /// The answer format.
    pub fn format(&self) -> Format {
        match self {
            ResultsAction::List { output, .. } => output.format,
            ResultsAction::Download { format, .. } => *format,
        }
    }

    /// `errand results list NAME`, or `errand results download RESULT --execution NAME -o FILE`:
    /// streams one result into a file (by default the result's name in the current directory).
    pub async fn exec(self, backend: &dyn Backend) -> Result<(), Error> {
        match self {
            ResultsAction::List { name, output } => {
                let record = find(backend, &name).await?;
                print_results(output.format, &backend.results(&record).await?);
                Ok(())
            }
            ResultsAction::Download {
                result,
                execution,
                file,
                format,
            } => download(backend, &result, &execution, file, format).await,
        }
    }
}

async fn download(
    backend: &dyn Backend,
    result: &str,
    name: &str,
    file: Option<PathBuf>,
    format: Format,
) -> Result<(), Error> {
    let result = parse_result_name(result)?;
    let record = find(backend, name).await?;
    let file = file.unwrap_or_else(|| PathBuf::from(result.file_name()));
    let shown = result.as_str().to_owned();
    let size = backend.download(&record, result, &file).await?;
    let answer = Downloaded {
        execution: record.name,
        result: shown,
        file,
        size,
    };
    print_ok(format, "download", &answer, || {
        format!("wrote {} ({})", answer.file.display(), human_size(size))
    });
    Ok(())
}
