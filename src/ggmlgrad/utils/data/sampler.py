"""``ggmlgrad.utils.data.sampler``: torch's module path to ``gg.data``'s samplers."""
from ...data import (BatchSampler, RandomSampler, Sampler, SequentialSampler, SubsetRandomSampler,
                     WeightedRandomSampler)

__all__ = ["Sampler", "SequentialSampler", "RandomSampler", "SubsetRandomSampler", "WeightedRandomSampler",
           "BatchSampler"]
