// BitwiseNot of an integer lane.
r = ~a;
