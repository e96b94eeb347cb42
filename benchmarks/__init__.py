"""gpdlm benchmarks: ratios against references measured in the same run (`make bench`)."""
