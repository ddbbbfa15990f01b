local x = = 3
