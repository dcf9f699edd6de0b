//! `errand results list|download`: an execution's saved results, listed or streamed into a file.

use std::path::PathBuf;

use crate::cli::answers::Downloaded;
use crate::cli::output::{Format, human_size, print_ok};
use crate::cli::show::{parse_result_name, print_results};
use crate::ops::Error;
use crate::ops::backend::Backend;
use crate::ops::lookup::Wanted;
use crate::ops::lookup::find;

/// `errand results ...`
#[derive(Debug, clap::Subcommand)]
pub enum ResultsAction {
    /// List the saved results with size and sha256.
    List {
        /// Execution name or unambiguous prefix.
        name: String,
    },
    /// Download one result into a file.
    Download {
        /// `input_workdir`, `output_workdir`, `output_artifacts`, `run_result`, `run_error` or `manifest.json`.
        result: String,
        /// Execution name or unambiguous prefix (`--job` is the same option).
        #[arg(long, visible_alias = "job")]
        execution: String,
        /// File to write (`--output-file` is the same option); defaults to the result's name in
        /// the current directory. `-o` is the answer's format, as on every command.
        #[arg(long = "out", visible_alias = "output-file", value_name = "FILE")]
        file: Option<PathBuf>,
    },
}

impl ResultsAction {
    /// `errand results list NAME`, or `errand results download RESULT --execution NAME --out FILE`:
    /// streams one result into a file (by default the result's name in the current directory).
    pub async fn exec(self, backend: &dyn Backend, format: Format) -> Result<(), Error> {
        match self {
            ResultsAction::List { name } => {
                let record = find(backend, &name).await?;
                print_results(format, &backend.results(&record).await?);
                Ok(())
            }
            ResultsAction::Download {
                result,
                execution,
                file,
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
    let saved = backend.results(&record).await?;
    if !saved.iter().any(|entry| entry.name == result.as_str()) {
        let names: Vec<String> = saved.into_iter().map(|entry| entry.name).collect();
        let wanted = Wanted::new(
            "result",
            "results saved",
            format!("execution {}", record.name),
            "an execution saves its results as it runs and when it ends",
        );
        return Err(wanted.not_found(result.as_str(), &names));
    }
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
