"""One package per lab, named by its key (labNN_topic, as solutions/NN_topic/): the exercise material students run
and the visible variants of its judgement exercises. The grader's unseen variants are autograder/unseen/, never here."""
