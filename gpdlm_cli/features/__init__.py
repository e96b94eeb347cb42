"""Input maps shared by model families: recurrent (LSTM/GRU/RNN/NARX) feature maps."""
