"""Instruments that measure a model without changing it: timing and the machine, benchmark
results, memory, gradients and their diagnoses, probes of attention and position, parameter and
FLOP counts, a switchable stack of layers to probe.

May import: tfx.core, tfx.model, tfx.numpy.
"""

from tfx import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "diagnose": ["dtype_census"],
        "flops": ["crossover_lengths", "layer_flops", "n_params", "param_counts", "shape_rows"],
        "grads": [
            "attention_grad_norms",
            "diagnose_missing_grads",
            "explain_missing_grads",
            "grad_norms",
            "layer_grad_norms",
            "max_min_report",
            "trace_backward",
            "watch_grad_breaks",
        ],
        "memory": ["peak_memory", "saved_for_backward"],
        "perf": [
            "alternate",
            "count_graphs",
            "fast_path_probe",
            "fast_paths",
            "format_rounds",
            "graphs_by_setting",
            "latest",
            "precision_advice",
            "quiet_stderr",
            "RESULTS",
            "round_stats",
            "skip_reason",
        ],
        "probes": [
            "diagonal_spread",
            "HEAD_ROLES",
            "head_roles",
            "pattern_attention",
            "perturb",
            "Perturbation",
            "perturbation_effect",
            "position_effect",
            "qk_variance",
            "softmax_jacobian",
            "softmax_saturation",
        ],
        "stack": [
            "activation_report",
            "build_stack",
            "gradient_report",
            "probe_stack",
            "Stack",
            "stack_loss",
            "StackConfig",
        ],
        "timing": [
            "blas_threads",
            "cpu_capability",
            "loglog_slope",
            "machine",
            "threads",
            "timeit",
        ],
    },
)
