"""Checkers for the notebooks' exercises, one module per chapter, and the workshop's.

    from commlib import exercises
    exercises.ch2_busbw(answer, nbytes=..., time_s=..., world_size=...)   # -> Verdict (.ok, shown as a line)

answers.py reads any answer (numbers, numpy scalars, arrays, tensors, names, a function run on the ranks) and
holds the one "close enough" (answers.close). A checker never raises on a wrong, odd or missing answer.
workshop.py is chapter 11's scenario and its checkers (imported as commlib.exercises.workshop).
learner_copies.py makes the notebooks' learner copies (python -m commlib learner-copies).
"""

from commlib.exercises.answers import Verdict, close  # noqa: F401
from commlib.exercises.ch0 import ch0_all_reduce_value, ch0_rank_max  # noqa: F401
from commlib.exercises.ch1 import ch1_ring_all_gather, ch1_ring_bytes  # noqa: F401
from commlib.exercises.ch2 import ch2_busbw, ch2_fastest, ch2_ring_time  # noqa: F401
from commlib.exercises.ch3 import (ch3_all_to_all_time, ch3_best_all_reduce, ch3_hierarchical_inter_bytes,  # noqa: F401
                                   ch3_multi_ring_busbw, ch3_share_after_move)
from commlib.exercises.ch4 import ch4_overflow_world_size, ch4_predivide_factor, ch4_safe_strategy  # noqa: F401
from commlib.exercises.ch5 import (ch5_allreduce_compatible, ch5_crossover, ch5_powersgd_bytes,  # noqa: F401
                                   ch5_topk_bytes)
from commlib.exercises.ch6 import ch6_best_bucket, ch6_overlapped_step  # noqa: F401
from commlib.exercises.ch7 import ch7_bubble, ch7_in_flight, ch7_tp_bytes, ch7_which_fits, ch7_zero3_memory  # noqa: F401
from commlib.exercises.ch8 import ch8_busiest, ch8_cp_bytes, ch8_redistribute, ch8_ring_exposed  # noqa: F401
from commlib.exercises.ch9 import (ch9_bucket_count, ch9_chunked_time, ch9_exposed, ch9_kernel_algorithm,  # noqa: F401
                                   ch9_replay_blind, ch9_replay_wait, ch9_reprice, ch9_straggler, ch9_trace_busbw)
from commlib.exercises.ch10 import ch10_culprit, ch10_fix_exchange, ch10_kind  # noqa: F401
