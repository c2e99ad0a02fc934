"""What a design review reads: the papermill batch (report), the notebooks' parameters,
loading and selecting measured rows (analysis), and the figures (plotting)."""
